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

/** The JIT warm-up: it runs the real encoder paths, stops at its round limit, and changes no batch. */
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
}
