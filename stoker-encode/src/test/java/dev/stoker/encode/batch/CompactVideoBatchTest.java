package dev.stoker.encode.batch;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.core.io.SeekableByteSource;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.encode.video.VideoEncoding;
import dev.stoker.image.qwenvl.CompactPixels;
import dev.stoker.plan.pack.PackedStep;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.testkit.Vectors;
import dev.stoker.text.SampleParser;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The compact wire format for video on the heap path (issue 29), Qwen3-VL, whose HF sampler keeps odd frame counts (a
 * 2.6 s clip at 25 fps: 5 frames, grid t = 3): the UINT8 encoder's samples carry each video's resized frames and
 * frame counts; a padded batch and a pack of them carry {@code pixel_values_videos_u8} and {@code video_frame_counts},
 * and the trainer's conversion — Java's {@link CompactPixels#toPixelValuesVideos} and the Python client's
 * {@code batch_to_pixel_values} (NumPy, and torch where installed) — gives the FLOAT32 batch's
 * {@code pixel_values_videos} (and {@code pixel_values}) bit for bit.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
@ExtendWith(SharedTokenizer.class)
class CompactVideoBatchTest {
    static final EncodeOptions F32 = EncodeOptions.defaults(ProcessorPreset.QWEN3_VL).withPixels(4096, 65536)
            .withVideo(VideoEncoding.defaults());
    static final EncodeOptions U8 = F32.withPixelFormat(PixelFormat.UINT8);

    @TempDir static Path dir;
    @TempDir Path work;
    static List<EncodedSample> floats, compact;

    @BeforeAll
    static void encode() throws Exception {
        FfmpegClips.require();
        FfmpegClips.h264(dir.resolve("odd.mp4"), "160x120", "25", 2.6);
        FfmpegClips.h264(dir.resolve("even.mp4"), "176x144", "25", 2);
        Files.copy(Vectors.get().inputImage("p01_photo_grace_hopper"), dir.resolve("photo.jpg"));
        String[] lines = {
            "{\"id\": \"v\", \"messages\": [{\"role\": \"user\", \"content\": \"<video>What moves?\"}, "
                    + "{\"role\": \"assistant\", \"content\": \"Lines.\"}], \"videos\": [\"odd.mp4\"]}",
            "{\"id\": \"iv\", \"messages\": [{\"role\": \"user\", \"content\": \"<image><video>Same?<video>\"}, "
                    + "{\"role\": \"assistant\", \"content\": \"No.\"}], \"videos\": [\"even.mp4\", \"odd.mp4\"], \"images\": [\"photo.jpg\"]}",
            "{\"id\": \"t\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi.\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}]}",
        };
        floats = encodeAll(F32, lines);
        compact = encodeAll(U8, lines);
    }

    private static List<EncodedSample> encodeAll(EncodeOptions options, String[] lines) {
        var parser = new SampleParser(SampleParser.Videos.ACCEPT);
        var encoder = new SampleEncoder(options, SharedTokenizer.get());
        var out = new ArrayList<EncodedSample>();
        for (String line : lines) {
            out.add(encoder.encode(parser.parseLine(line.getBytes(StandardCharsets.UTF_8), "?"), (id, ref) -> {
                try {
                    return Files.readAllBytes(dir.resolve(ref));
                } catch (java.io.IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            }, (id, ref) -> SeekableByteSource.of(dir.resolve(ref))));
        }
        return out;
    }

    private static ScheduledBatch scheduled(int size) {
        var cursor = new ScheduleCursor(2, 16);
        var plan = new PackedStep(cursor, new ScheduleCursor(2, 30), 9, new int[][] {new int[0], new int[size]}, new double[2],
                new int[2], new int[2], new boolean[] {false, false}, new int[0], new int[0]);
        return new ScheduledBatch(cursor, 4, 9, 1, new int[size], null, plan);
    }

    @Test
    void aCompactSampleCarriesEachVideosResizedFramesAndItsFrameCount() {
        for (int i = 0; i < floats.size(); i++) {
            var f = floats.get(i).videos();
            var c = compact.get(i).videos();
            assertEquals(f.videos(), c.videos(), "sample " + i);
            if (f.videos() == 0) continue;
            assertEquals(0, c.pixelValuesVideos().length, "no float rows in the compact format");
            assertArrayEquals(f.videoGridThw(), c.videoGridThw());
            assertArrayEquals(f.frameIndices(), c.frameIndices());
            long bytes = 0;
            for (int k = 0; k < c.videos(); k++) {
                long t = c.videoGridThw()[3 * k], frames = c.frameCounts()[k];
                assertEquals(t, (frames + 1) / 2, "t = ceil(T / 2)");
                bytes += frames * c.videoGridThw()[3 * k + 1] * 16 * c.videoGridThw()[3 * k + 2] * 16 * 3;
            }
            assertEquals(bytes, c.pixelsU8().length, "Σ T·H·W·3");
        }
        assertArrayEquals(new long[] {5}, compact.get(0).videos().frameCounts(), "an odd frame count: its last frame is repeated by the conversion");
        assertArrayEquals(new long[] {4, 5}, compact.get(1).videos().frameCounts());
    }

    @Test
    void paddedBatchesAndPacksConvertToTheFloat32TensorsBitForBit() throws Exception {
        var indices = new int[] {0, 1, 2};
        var batches = List.of(
                new BatchAssembler(F32).assemble(scheduled(3), indices, floats, List.of()),
                new BatchAssembler(U8).assemble(scheduled(3), indices, compact, List.of()),
                new PackAssembler(F32, 1).assemble(scheduled(3), indices, floats, List.of()),
                new PackAssembler(U8, 1).assemble(scheduled(3), indices, compact, List.of()));
        var trainerTensors = new ArrayList<List<Tensor>>();
        for (int k = 0; k < 4; k += 2) {
            Batch f = batches.get(k), c = batches.get(k + 1);
            String what = f.shape().packed() ? "pack" : "padded batch";
            assertEquals(new BatchShape.Videos(f.shape().videos().rows(), 3, false, c.videos().pixelsU8().length), c.shape().videos(), what);
            assertArrayEquals(new long[] {5, 4, 5}, c.videos().frameCounts(), what + ": the videos in sample order");
            assertArrayEquals(f.videos().videoGridThw(), c.videos().videoGridThw(), what);
            assertBitEqual(f.videos().pixelValuesVideos(), CompactPixels.toPixelValuesVideos(MemorySegment.ofArray(c.videos().pixelsU8()),
                    c.videos().videoGridThw(), c.videos().frameCounts(), U8.vision()), what + ": Java's conversion");
            // the layout a trainer reads: the u8 frames a model input, the frame counts metadata, after pixel_patch
            var laid = layoutOf(c);
            var names = laid.tensors().stream().map(Tensor::name).toList();
            assertEquals(BatchSchema.names(c.shape()), names);
            assertEquals(BatchSchema.VIDEO_FRAME_COUNTS, names.getLast(), what);
            assertTrue(laid.inputs().stream().anyMatch(t -> t.name().equals(BatchSchema.PIXEL_VALUES_VIDEOS_U8)), what);
            assertTrue(laid.metadata().stream().anyMatch(t -> t.name().equals(BatchSchema.VIDEO_FRAME_COUNTS)), what);
            assertTrue(laid.tensors().stream().noneMatch(t -> t.name().equals(BatchSchema.PIXEL_VALUES_VIDEOS)), what);
            assertArrayEquals(new long[] {c.videos().pixelsU8().length / 3, 3}, laid.tensor(BatchSchema.PIXEL_VALUES_VIDEOS_U8).shape());
            assertTrue(c.sizeBytes() * 3 < f.sizeBytes(), what + ": " + c.sizeBytes() + " vs " + f.sizeBytes() + " bytes");
            trainerTensors.add(laid.tensors());
        }
        assumeTrue(PythonPixels.available(), PythonPixels.PYTHON + " with NumPy is missing: the Python conversion is not checked");
        var converted = PythonPixels.convert(work, trainerTensors);
        for (int k = 0; k < 2; k++) {
            Batch f = batches.get(2 * k);
            String what = "Python, " + (f.shape().packed() ? "pack" : "padded batch");
            var expectedKeys = layoutOf(f).inputs().stream().map(Tensor::name).toList();
            assertEquals(expectedKeys, converted.get(k).keys(), what + ": the float32 batch's model inputs, in order");
            assertBitEqual(f.videos().pixelValuesVideos(), converted.get(k).floats().get(BatchSchema.PIXEL_VALUES_VIDEOS), what);
            assertBitEqual(f.pixelValues(), converted.get(k).floats().get(BatchSchema.PIXEL_VALUES), what + ": pixel_values");
        }
    }

    @Test
    void frameCountsThatDoNotFitTheGridAreRefused() {
        var c = compact.get(0).videos();
        var e = assertThrows(IllegalArgumentException.class, () -> CompactPixels.toPixelValuesVideos(
                MemorySegment.ofArray(c.pixelsU8()), c.videoGridThw(), new long[] {7}, U8.vision()));
        assertEquals("video 0 has 7 frames, its grid t = 3 needs 5 to 6", e.getMessage());
        var batch = new BatchAssembler(U8).assemble(scheduled(1), new int[] {2}, List.of(compact.get(2)), List.of());
        assertNull(batch.videos(), "a batch without a video carries no video tensor");
        assertTrue(BatchSchema.names(batch.shape()).stream().noneMatch(n -> n.contains("video")));
    }

    static BatchLayout.Batch layoutOf(Batch b) {
        var prepared = BatchSchema.tensors(b, 2, U8.vision());
        var dst = Arena.ofAuto().allocate(BatchLayout.sizeOf(prepared.tensors()), 64);
        BatchLayout.write(prepared.meta(), prepared.tensors(), dst);
        return BatchLayout.read(dst);
    }

    static void assertBitEqual(float[] expected, float[] actual, String what) {
        assertEquals(expected.length, actual.length, what + ": length");
        for (int k = 0; k < expected.length; k++)
            if (Float.floatToRawIntBits(expected[k]) != Float.floatToRawIntBits(actual[k]))
                throw new AssertionError(what + ": differ at float " + k + ": " + expected[k] + " vs " + actual[k]);
    }
}
