package dev.stoker.pipeline.feed;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import java.nio.file.Path;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * The JIT warm-up: it runs the real encoder paths, stops at its round limit, and changes no batch; with a cache of
 * preprocessed samples it goes through a throwaway one (its hit path compiled too) and leaves the service's untouched.
 */
@Timeout(60)
@ExtendWith(SharedTokenizer.class)
class CpuWarmUpTest {
    @TempDir Path tmp;

    @Test
    void theMadeUpSampleGoesThroughBothEncoderPaths() {
        var encoder = new SampleEncoder(FeederTest.OPTIONS, SharedTokenizer.get());
        var warmUp = CpuWarmUp.create();
        assertEquals(3, warmUp.run(encoder, true, 60_000, 3), "in place: prepare + writePixels, three rounds");
        assertEquals(2, warmUp.run(encoder, false, 60_000, 2), "heap: encode, two rounds");
        assertEquals(0, warmUp.run(encoder, false, 0, 5), "no time, no round");
        assertEquals(0, encoder.decodeNanos() + encoder.transformNanos() + encoder.tokenizeNanos(), "the warm-up leaves no stage time behind");
    }

    /**
     * A video job's warm-up also runs its video pixel writer (from mapped and heap frames, into a mapped segment), the
     * rows a cached clip goes through; an encoder without video runs none; the rows are the writer's.
     */
    @Test
    void aVideoJobsWarmUpRunsItsVideoWriter() {
        var video = new SampleEncoder(FrameListFeedTest.OPTIONS, SharedTokenizer.get());
        var images = new SampleEncoder(FeederTest.OPTIONS, SharedTokenizer.get());
        try (var arena = java.lang.foreign.Arena.ofShared()) {
            assertEquals(5, CpuWarmUp.runVideo(video, arena, 5, 60_000));
            assertEquals(0, CpuWarmUp.runVideo(video, arena, 5, 0), "no time, no round");
            assertEquals(0, CpuWarmUp.runVideo(images, arena, 5, 60_000), "no video, no round");
            long[] bytes = video.videoWarmUpBytes();
            // 3 frames of S×S×3 bytes; two temporal patches of (S/p)² rows of 3·2·p² float32 values: 48·S² bytes
            assertEquals(bytes[0] / 9 * 48, bytes[1], java.util.Arrays.toString(bytes));
        }
        assertEquals(3, CpuWarmUp.create().run(video, true, 60_000, 3), "the image rounds as before");
    }

    /** The warm-up writes pixels into a mapped segment, the kind the store's are, and leaves no file behind. */
    @Test
    void itsScratchSegmentIsAMappedFileLikeTheStoresAndLeavesNoFile() throws Exception {
        try (var arena = java.lang.foreign.Arena.ofShared()) {
            var dir = java.nio.file.Files.createDirectory(tmp.resolve("shm"));
            var segment = CpuWarmUp.mappedScratch(arena, 3 << 20, dir);
            assertTrue(segment.isMapped(), "a mapped segment, not a malloc'd one");
            assertEquals(3 << 20, segment.byteSize());
            segment.set(java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED, (3 << 20) - 4, 1.5f);
            assertEquals(1.5f, segment.get(java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED, (3 << 20) - 4));
            try (var files = java.nio.file.Files.list(dir)) {
                assertEquals(0, files.count(), "the file is unlinked at once");
            }
        }
    }

    @Test
    void aWarmedUpFeedYieldsTheSameBatches() throws Exception {
        Path manifest = TestDatasets.write(tmp, 13, Set.of());
        try (var source = new LocalFeedSource(manifest, 3)) {
            var cold = FeederTest.run(FeederTest.config(FeedMode.PREFETCH, 2, 3, 2), source, 3);
            var warm = FeederTest.run(FeederTest.config(FeedMode.PREFETCH, 2, 3, 2).withWarmUp(300), source, 3);
            FeederTest.assertSameBatches(cold, warm, "prefetch with a 300 ms warm-up");
            assertTrue(cold.size() == 6);
        }
    }

    @Test
    void withACacheItWarmsUpThroughAThrowawayOneAndLeavesTheServicesUntouched() throws Exception {
        try (var store = dev.stoker.cache.SampleCache.open(tmp.resolve("cache"), 256L << 20)) {
            var cache = new dev.stoker.encode.cache.PreprocessedCache(store);
            try (var pool = new CpuPool(2, 2, 16, FeederTest.OPTIONS, SharedTokenizer.get(), cache)) {
                int[] rounds = pool.warmUp(true, 30_000, 55_000);
                assertEquals(2, rounds.length);
                for (int r : rounds) assertTrue(r >= 2 && r <= CpuWarmUp.MAX_ROUNDS_CACHED, "rounds " + java.util.Arrays.toString(rounds));
                var scratch = pool.lastWarmUpCache();
                assertTrue(scratch != null, "a scratch cache");
                assertTrue(scratch.stats().written() >= 1, "the first round fills it: " + scratch.stats());
                assertTrue(scratch.stats().hits() >= 1, "later rounds read it back: " + scratch.stats());
                assertTrue(java.nio.file.Files.notExists(scratch.dir()), "its folder is deleted");
            }
            var mine = store.stats();
            assertEquals(0, mine.hits() + mine.misses() + mine.written(), "the service's cache is not used: " + mine);
            try (var left = java.nio.file.Files.walk(tmp.resolve("cache"))) {
                assertEquals(0, left.filter(java.nio.file.Files::isRegularFile).count(), "no entry in the service's cache");
            }
        }
        try (var pool = new CpuPool(1, 1, 16, FeederTest.OPTIONS, SharedTokenizer.get(), null)) {
            assertEquals(1, pool.warmUp(true, 30_000, 55_000).length);
            assertEquals(null, pool.lastWarmUpCache(), "no cache, no scratch one");
        }
    }
}
