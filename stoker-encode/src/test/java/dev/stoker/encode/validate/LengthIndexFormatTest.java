package dev.stoker.encode.validate;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.plan.pack.SampleShape;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The length index's format 4 (a videos column and a per-video (t, t·h·w) table, issue 29; a clips column and a per-clip
 * frames table, issue 32) on synthetic shapes, and formats 3 (written before audio packs) and 2 (written before video)
 * still read, as an index without clips (and videos); tables that disagree are refused. Needs no FFmpeg.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class LengthIndexFormatTest {
    @TempDir Path tmp;

    static final Map<String, Object> SETTINGS = Map.of("processor", "qwen2-vl");
    static final int[] LENGTHS = {300, LengthIndex.ERROR, 820, LengthIndex.FILTERED, 40};
    static final int[][] IMAGES = {{256}, null, {64, 100}, null, null};
    static final int[][] VIDEO_PATCHES = {null, null, {2 * 300, 4 * 80}, null, null};
    static final int[][] VIDEO_GROUPS = {null, null, {2, 4}, null, null};

    @Test
    void format4HoldsEachVideosGroupsAndPatches() throws Exception {
        var index = LengthIndex.of("s", "ab", SETTINGS, LENGTHS, IMAGES, VIDEO_PATCHES, VIDEO_GROUPS);
        Path file = index.write(tmp);
        var back = LengthIndex.read(file);
        assertArrayEquals(LENGTHS, back.lengths());
        assertEquals(2, back.videos(2));
        assertArrayEquals(new int[] {600, 320}, back.videoPatches(2));
        assertArrayEquals(new int[] {2, 4}, back.videoGroups(2));
        assertEquals(0, back.videos(0));
        var shape = ShapeIndexes.of(back).shape(2);
        assertEquals(SampleShape.of(820, new int[] {64, 100}, new int[] {600, 320}, new int[] {2, 4}), shape);
        assertEquals(164 + 920, shape.patches());
        assertEquals(SampleShape.of(40), ShapeIndexes.of(back).shape(4));
        assertEquals(SampleShape.Kind.ERROR, ShapeIndexes.of(back).shape(1).kind());

        byte[] raw = Files.readAllBytes(file);
        var le = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
        int table = 12 + le.getInt(8);
        int videoTable = table + 20 * LENGTHS.length + 4 * 3;
        assertEquals(videoTable + 8 * 2, raw.length);
        le.putInt(videoTable + 8, 3); // the second video: 320 patches in 3 groups, not a multiple
        Files.write(file, raw);
        var e = assertThrows(IOException.class, () -> LengthIndex.read(file));
        assertTrue(e.getMessage().contains("temporal groups"), e.getMessage());
        le.putInt(videoTable + 8, 4);
        le.putInt(table + 20 * 4 + 12, 1); // record 4 claims a video the table does not hold
        Files.write(file, raw);
        e = assertThrows(IOException.class, () -> LengthIndex.read(file));
        assertTrue(e.getMessage().contains("videos"), e.getMessage());
    }

    static final int[][] CLIPS = {{250, 300}, {100}, null, {50}, {1500}};

    /**
     * An audio family's clips (issue 32): each kept record's clips' frames, read back and given to the planner's shapes
     * ({@link SampleShape#clipFrames}); an error's or a filtered record's are not kept; a clip table that disagrees is refused.
     */
    @Test
    void format4HoldsEachKeptRecordsClipsFrames() throws Exception {
        var index = LengthIndex.of("s", "ab", SETTINGS, LENGTHS, IMAGES, VIDEO_PATCHES, VIDEO_GROUPS).withClips(CLIPS);
        assertEquals(0, index.clips(1), "an error's clips are not kept");
        assertEquals(0, index.clips(3), "a filtered record's neither");
        Path file = index.write(tmp);
        var back = LengthIndex.read(file);
        assertArrayEquals(new int[] {250, 300}, back.clipFrames(0));
        assertArrayEquals(new int[] {1500}, back.clipFrames(4));
        assertEquals(0, back.clips(2));
        var shapes = ShapeIndexes.of(back);
        assertArrayEquals(new int[] {250, 300}, shapes.shape(0).clipFrames());
        assertEquals(0, shapes.shape(2).clips());
        assertEquals(SampleShape.Kind.ERROR, shapes.shape(1).kind());
        assertArrayEquals(new int[] {1500}, shapes.shape(4).clipFrames());

        byte[] raw = Files.readAllBytes(file);
        var le = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
        int table = 12 + le.getInt(8);
        int clipTable = table + 20 * LENGTHS.length + 4 * 3 + 8 * 2;
        assertEquals(clipTable + 4 * 3, raw.length, "three clips kept");
        le.putInt(clipTable + 4, 0); // record 0's second clip: no frames
        Files.write(file, raw);
        var e = assertThrows(IOException.class, () -> LengthIndex.read(file));
        assertTrue(e.getMessage().contains("a clip of 0 frames"), e.getMessage());
        le.putInt(clipTable + 4, 300);
        le.putInt(table + 20 * 2 + 16, 1); // record 2 claims a clip the table does not hold
        Files.write(file, raw);
        e = assertThrows(IOException.class, () -> LengthIndex.read(file));
        assertTrue(e.getMessage().contains("clips"), e.getMessage());
    }

    /** A file as the writer before audio packs wrote it (STKLEN03, four columns, no clip table): read, without clips. */
    @Test
    void aFormat3FileIsReadAsAnIndexWithoutClips() throws Exception {
        var index = LengthIndex.of("s", "ab", SETTINGS, LENGTHS, IMAGES, VIDEO_PATCHES, VIDEO_GROUPS);
        var header = new LinkedHashMap<String, Object>();
        header.put("key", index.key());
        header.put("source", "s");
        header.put("digest", "ab");
        header.put("records", LENGTHS.length);
        header.put("images", 3);
        header.put("videos", 2);
        header.put("settings", SETTINGS);
        byte[] json = new ObjectMapper().writeValueAsBytes(header);
        int padded = json.length + (8 - (12 + json.length) % 8) % 8;
        var buf = ByteBuffer.allocate(12 + padded + 16 * LENGTHS.length + 4 * 3 + 8 * 2).order(ByteOrder.LITTLE_ENDIAN);
        buf.put("STKLEN03".getBytes(StandardCharsets.US_ASCII)).putInt(padded).put(json);
        while (buf.position() < 12 + padded) buf.put((byte) ' ');
        for (int i = 0; i < LENGTHS.length; i++)
            buf.putInt(LENGTHS[i]).putInt(index.images(i)).putInt((int) index.patches(i)).putInt(index.videos(i));
        for (int p : new int[] {256, 64, 100}) buf.putInt(p);
        buf.putInt(2).putInt(600).putInt(4).putInt(320);
        Path file = Files.write(tmp.resolve("lengths-" + index.key() + ".bin"), buf.array());
        var back = LengthIndex.read(file);
        assertArrayEquals(LENGTHS, back.lengths());
        assertArrayEquals(new int[] {600, 320}, back.videoPatches(2));
        assertEquals(0, back.clipFrames().length);
        assertEquals(SampleShape.of(820, new int[] {64, 100}, new int[] {600, 320}, new int[] {2, 4}), ShapeIndexes.of(back).shape(2));
    }

    /** A file as the writer before video wrote it (STKLEN02, three columns, no video table): read, without videos. */
    @Test
    void aFormat2FileIsReadAsAnIndexWithoutVideos() throws Exception {
        var index = LengthIndex.of("s", "ab", SETTINGS, LENGTHS, IMAGES);
        var header = new LinkedHashMap<String, Object>();
        header.put("key", index.key());
        header.put("source", "s");
        header.put("digest", "ab");
        header.put("records", LENGTHS.length);
        header.put("images", 3);
        header.put("settings", SETTINGS);
        byte[] json = new ObjectMapper().writeValueAsBytes(header);
        int padded = json.length + (8 - (12 + json.length) % 8) % 8;
        var buf = ByteBuffer.allocate(12 + padded + 12 * LENGTHS.length + 4 * 3).order(ByteOrder.LITTLE_ENDIAN);
        buf.put("STKLEN02".getBytes(StandardCharsets.US_ASCII)).putInt(padded).put(json);
        while (buf.position() < 12 + padded) buf.put((byte) ' ');
        for (int i = 0; i < LENGTHS.length; i++) buf.putInt(LENGTHS[i]).putInt(index.images(i)).putInt((int) index.patches(i));
        for (int p : new int[] {256, 64, 100}) buf.putInt(p);
        Path file = Files.write(tmp.resolve("lengths-" + index.key() + ".bin"), buf.array());
        var back = LengthIndex.read(file);
        assertArrayEquals(LENGTHS, back.lengths());
        assertArrayEquals(new int[] {64, 100}, back.imagePatches(2));
        assertEquals(0, back.videoPatches().length);
        for (int i = 0; i < LENGTHS.length; i++) assertEquals(0, back.videos(i));
        assertEquals(SampleShape.of(820, 64, 100), ShapeIndexes.of(back).shape(2));
        assertEquals(SETTINGS, back.settings());
    }
}
