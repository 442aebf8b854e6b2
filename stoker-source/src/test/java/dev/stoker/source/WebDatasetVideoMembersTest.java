package dev.stoker.source;

import static dev.stoker.source.WebDatasetFormatTest.failure;
import static dev.stoker.source.WebDatasetFormatTest.get;
import static dev.stoker.source.WebDatasetFormatTest.image;
import static dev.stoker.source.WebDatasetFormatTest.json;
import static dev.stoker.source.WebDatasetFormatTest.open;
import static dev.stoker.source.WebDatasetFormatTest.records;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.source.Tars.Member;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.commons.compress.archivers.tar.TarArchiveEntry;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Video members of WebDataset shards (issue 29): indexed after the images, by the images' naming rule, given as the
 * record's {@link SampleRecords.EmbeddedVideo}s (opened by range of the shard, never read with the record), bounded at
 * 4 GiB − 1 bytes by the index's unsigned 32-bit lengths, which survive the index file.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class WebDatasetVideoMembersTest {
    @TempDir Path tmp;

    static byte[] bytes(String text) { return text.getBytes(StandardCharsets.US_ASCII); }

    /** The whole of an opened video, read through its SeekableByteSource in small reads. */
    static byte[] readAll(SeekableByteSource s) throws IOException {
        var out = new java.io.ByteArrayOutputStream();
        var buf = MemorySegment.ofArray(new byte[7]);
        long at = 0;
        for (int n; (n = s.read(at, buf)) > 0; at += n) out.write(buf.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE), 0, n);
        return out.toByteArray();
    }

    @Test
    void videoMembersAreTheSamplesVideosInOrderAfterItsImagesAndOpenByRange() throws Exception {
        Tars.write(tmp.resolve("v.tar"), List.of(
                new Member("v.json", json("v")),
                new Member("v.1.mp4", bytes("second video")),
                new Member("v.jpg", image(0)),
                Member.text("v.txt", "a caption"),
                new Member("v.0.AVI", bytes("first video, an AVI")),
                new Member("u.json", json("u")),
                new Member("u.webm", bytes("the only video")),
                new Member("w.json", json("w")),
                new Member("w.mkv", bytes("unnumbered")),
                new Member("w.0.mov", bytes("numbered")),
                new Member("x.json", json("x")),
                new Member("x.mp4", bytes("one")),
                new Member("x.mov", bytes("two")),
                new Member("y.json", json("y")),
                new Member("y.0.mp4", bytes("one")),
                new Member("y.00.mp4", bytes("also zero")),
                new Member("z.json", json("z")),
                new Member("z.jpg", image(1))));
        var cache = new ManifestRecords.IndexCache(tmp.resolve("cache"), 0);
        for (boolean cached : new boolean[] {false, true}) {
            try (var source = open(tmp.resolve("v.tar"))) {
                var records = records(source, cache);
                assertEquals(cached, records.fromCache());
                assertEquals(6, records.size());
                assertTrue(records.mayHoldVideo(), "a shard with video members (--video auto)");
                var v = get(records, 0);
                assertArrayEquals(json("v"), v.json());
                assertEquals(List.of("v.jpg"), v.imageNames());
                assertArrayEquals(image(0), v.images().getFirst().bytes());
                assertEquals(List.of("v.0.AVI", "v.1.mp4"), v.videoNames(), "numbered videos in numeric order, apart from the images");
                assertEquals(bytes("first video, an AVI").length, v.videos().get(0).sizeBytes());
                try (var s = v.videos().get(0).open()) {
                    var ranged = assertInstanceOf(RangedObjectBytes.class, s, "read by range of the shard");
                    assertEquals("v.tar:v.0.AVI", s.name());
                    assertArrayEquals(bytes("first video, an AVI"), readAll(s));
                    assertEquals(1, ranged.fetches());
                }
                try (var s = v.videos().get(1).open()) {
                    assertArrayEquals(bytes("second video"), readAll(s));
                }
                var u = get(records, 1);
                assertEquals(List.of(), u.images());
                assertEquals(List.of("u.webm"), u.videoNames());
                try (var s = u.videos().getFirst().open()) {
                    assertArrayEquals(bytes("the only video"), readAll(s));
                }
                assertEquals("v.tar:w has both an unnumbered video (w.mkv) and numbered ones (w.0.mov, …)", failure(records, 2).getMessage());
                assertEquals("v.tar:x has two unnumbered videos, x.mp4 and x.mov (number them: x.0.mp4, x.1.mp4, …)", failure(records, 3).getMessage());
                assertEquals("v.tar:y has two videos numbered 0, y.0.mp4 and y.00.mp4", failure(records, 4).getMessage());
                var z = get(records, 5);
                assertEquals(List.of("z.jpg"), z.imageNames());
                assertEquals(List.of(), z.videos(), "a sample without video members carries none");
            }
        }
    }

    /** An index of version 2 (video members refused at indexing) is not used: the shard is indexed again and its videos served. */
    @Test
    void anIndexOfVersionTwoIsIndexedAgain() throws Exception {
        Tars.write(tmp.resolve("v.tar"), List.of(new Member("a.json", json("a")), new Member("a.mp4", bytes("video"))));
        var cache = new ManifestRecords.IndexCache(tmp.resolve("cache"), 0);
        try (var source = open(tmp.resolve("v.tar"))) {
            assertEquals(0, records(source, cache).brokenSamples());
        }
        try (var files = Files.list(tmp.resolve("cache"))) {
            for (Path f : files.toList()) {
                byte[] b = Files.readAllBytes(f);
                assertEquals(4, b[7], "the version, the int after the magic");
                b[7] = 2;
                Files.write(f, b);
            }
        }
        try (var source = open(tmp.resolve("v.tar"))) {
            var records = records(source, cache);
            assertFalse(records.fromCache(), "a version-2 index is not used");
            assertEquals(List.of("a.mp4"), get(records, 0).videoNames());
        }
    }

    /**
     * A 3 GiB video member (past a signed int) is indexed, its length kept through the index file, and a read at its end
     * fetches one block; a member of 4 GiB is its sample's problem. The shard is sparse (its members' data are holes).
     * Indexing the local shard reads its headers and seeks over its members' data: under 1 MiB read of 7 GiB.
     */
    @Test
    void videoMembersUpTo4GiBAreIndexedAndReadByRangeAtTheirEnd() throws Exception {
        long three = 3L << 30, four = 4L << 30;
        Path shard = tmp.resolve("big.tar");
        try (var ch = FileChannel.open(shard, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
            long at = 0;
            at = member(ch, at, "a.json", json("a"));
            at = header(ch, at, "a.mp4", three);
            ch.write(ByteBuffer.wrap(bytes("the end marker!!")), at + three - 16);
            at += (three + 511) & ~511L;
            at = member(ch, at, "b.json", json("b"));
            at = header(ch, at, "b.mp4", four);
            at += (four + 511) & ~511L;
            ch.write(ByteBuffer.allocate(1024), at); // the two zero blocks that end a tar
        }
        var builder = new TarIndex.Builder();
        long read;
        try (var source = open(shard); var in = new CountingReads(source.open("big.tar"))) {
            builder.scan("big.tar", "big.tar", in, Files.size(shard));
            read = in.read;
        }
        assertTrue(read < 1 << 20, read + " bytes read to index a shard of " + Files.size(shard)); // 64 KiB buffers by the headers
        var index = builder.build();
        index.write(tmp.resolve("index"), "key");
        for (var ix : List.of(index, TarIndex.read(tmp.resolve("index"), "key"))) {
            try (var source = open(shard)) {
                var records = new WebDatasetRecords("big.tar", source, ix, new byte[32], false);
                var a = get(records, 0);
                var video = a.videos().getFirst();
                assertEquals(three, video.sizeBytes(), "an unsigned 32-bit length");
                try (var s = video.open()) {
                    var ranged = (RangedObjectBytes) s;
                    assertEquals(three, s.sizeBytes());
                    byte[] end = new byte[16];
                    assertEquals(16, s.read(three - 16, MemorySegment.ofArray(end)));
                    assertArrayEquals(bytes("the end marker!!"), end);
                    assertEquals(-1, s.read(three, MemorySegment.ofArray(end)));
                    assertEquals(RangedObjectBytes.BLOCK_BYTES, ranged.bytesFetched(), "one block of the 3 GiB member");
                }
                String problem = failure(records, 1).getMessage();
                assertTrue(problem.startsWith("big.tar:b has video member b.mp4 of " + four + " bytes, over the limit of "
                        + TarIndex.MAX_VIDEO_MEMBER_BYTES), problem);
            }
        }
    }

    /** An index file whose json member is longer than 256 MiB is refused; a video member's length is read unsigned. */
    @Test
    void anIndexFileIsCheckedForEachMembersBoundByItsSuffix() throws Exception {
        Tars.write(tmp.resolve("v.tar"), List.of(new Member("a.json", json("a")), new Member("a.mp4", bytes("video"))));
        var builder = new TarIndex.Builder();
        try (var source = open(tmp.resolve("v.tar")); var in = source.open("v.tar")) {
            builder.scan("v.tar", "v.tar", in, Files.size(tmp.resolve("v.tar")));
        }
        Path file = tmp.resolve("index");
        builder.build().write(file, "k");
        // magic, version, key "k", 5 counts, shard "v.tar", shardStart[2], firstMember[2], offsets[2]: then lengths[2]
        int lengths = 4 + 4 + (4 + 1) + 5 * 4 + (4 + 5) + 2 * 4 + 2 * 4 + 2 * 8;
        byte[] good = Files.readAllBytes(file);
        assertEquals(json("a").length, ByteBuffer.wrap(good, lengths, 4).getInt());
        assertEquals(5, ByteBuffer.wrap(good, lengths + 4, 4).getInt());
        byte[] bigVideo = good.clone();
        ByteBuffer.wrap(bigVideo).putInt(lengths + 4, -1);
        Files.write(file, bigVideo);
        assertEquals(TarIndex.MAX_VIDEO_MEMBER_BYTES, TarIndex.read(file, "k").length(1), "4 GiB - 1, unsigned");
        byte[] bigJson = good.clone();
        ByteBuffer.wrap(bigJson).putInt(lengths, (int) TarIndex.MAX_MEMBER_BYTES + 1);
        Files.write(file, bigJson);
        var e = org.junit.jupiter.api.Assertions.assertThrows(IOException.class, () -> TarIndex.read(file, "k"));
        assertTrue(e.getMessage().contains("is malformed"), e.getMessage());
    }

    /** Counts the bytes read through it (skips are not reads). */
    private static final class CountingReads extends java.io.FilterInputStream {
        long read;

        CountingReads(java.io.InputStream in) { super(in); }

        @Override
        public int read() throws IOException {
            int b = in.read();
            if (b >= 0) read++;
            return b;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = in.read(b, off, len);
            if (n > 0) read += n;
            return n;
        }
    }

    private static long member(FileChannel ch, long at, String name, byte[] data) throws IOException {
        at = header(ch, at, name, data.length);
        ch.write(ByteBuffer.wrap(data), at);
        return at + ((data.length + 511) & ~511L);
    }

    private static long header(FileChannel ch, long at, String name, long size) throws IOException {
        var e = new TarArchiveEntry(name);
        e.setSize(size);
        byte[] block = new byte[512];
        e.writeEntryHeader(block);
        ch.write(ByteBuffer.wrap(block), at);
        return at + 512;
    }
}
