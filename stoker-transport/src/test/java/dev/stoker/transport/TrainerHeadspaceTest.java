package dev.stoker.transport;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link TrainerClient#headspace}: the replayed copies are the first batches, asked of nobody (the server counts the
 * requests), and the compute floor, the median of the replayed steps' compute (a known sleep here), reaches the provider
 * once with the request after the replay ({@link FeedServer}'s 32-byte NEXT).
 */
@Timeout(60)
class TrainerHeadspaceTest {
    static final long STEP_MS = 10;

    @TempDir Path tmp;

    /** The Synthetic provider, recording what the trainer reported. */
    static final class Recording extends FeedServerTest.Synthetic {
        final List<long[]> timings = new CopyOnWriteArrayList<>();
        final List<long[]> floors = new CopyOnWriteArrayList<>();

        Recording(int steps) { super(1, steps); }

        @Override
        public void report(int rank, long connection, long waitNanos, long stepNanos) { timings.add(new long[] {waitNanos, stepNanos}); }

        @Override
        public void reportHeadspace(int rank, long connection, long floorNanos, long replayedSteps) {
            floors.add(new long[] {floorNanos, replayedSteps});
        }
    }

    @Test
    void replayedBatchesAskTheServiceNothingAndTheFloorReachesIt() throws Exception {
        var provider = new Recording(6);
        Path sock = tmp.resolve("feed.sock");
        var sampleIndex = new ArrayList<Long>();
        var requestsSeen = new ArrayList<Integer>();
        long floor;
        try (var server = new FeedServer(sock, provider, false);
             var client = TrainerClient.connect(sock, 0, 1, "t", TrainerClient.Options.SHARED_MEMORY).headspace(2, 5)) {
            assertTrue(client.welcome().takesHeadspace());
            while (true) {
                try (var got = client.next()) {
                    if (got == null) break;
                    sampleIndex.add(got.batch().tensor("sample_index").toLongs()[0]);
                    requestsSeen.add(provider.served[0].get());
                    Thread.sleep(STEP_MS); // the trainer's compute: a known sleep
                }
            }
            floor = client.computeFloorNanos();
            assertEquals(5, client.replayed());
            assertTrue(client.headspaceReported());
            assertEquals(5, client.replayStepNanos().size());
            for (long step : client.replayStepNanos()) assertTrue(step >= STEP_MS * 1_000_000, "a replayed step holds the sleep: " + step);
        }
        // batches 0 and 1 from the service, 5 copies of them round robin, then batches 2 to 5
        assertEquals(List.of(0L, 1L, 0L, 1L, 0L, 1L, 0L, 2L, 3L, 4L, 5L), sampleIndex);
        assertEquals(List.of(1, 2, 2, 2, 2, 2, 2, 3, 4, 5, 6), requestsSeen, "no request while the copies were replayed");
        assertEquals(7, provider.served[0].get(), "six batches and the request answered with END");
        assertTrue(floor >= STEP_MS * 1_000_000, "the floor holds the sleep: " + floor);
        assertEquals(1, provider.floors.size());
        assertEquals(floor, provider.floors.get(0)[0]);
        assertEquals(5, provider.floors.get(0)[1]);
        assertEquals(6, provider.timings.size(), "a timing per batch from the service, none for a replayed one");
        for (long[] t : provider.timings) assertTrue(t[1] >= STEP_MS * 1_000_000 && t[1] < 10_000_000_000L, "a real step's compute: " + t[1]);
    }

    @Test
    void headspaceIsSetOnceBeforeTheFirstBatch() throws Exception {
        Path sock = tmp.resolve("feed.sock");
        try (var server = new FeedServer(sock, new Recording(3), false);
             var client = TrainerClient.connect(sock, 0, 1, "t")) {
            assertThrows(IllegalArgumentException.class, () -> client.headspace(0, 3));
            assertThrows(IllegalArgumentException.class, () -> client.headspace(2, 0));
            assertThrows(IllegalArgumentException.class, () -> client.headspace(1025, 3));
            client.next();
            assertThrows(IllegalStateException.class, () -> client.headspace(1, 1));
            assertEquals(-1, client.computeFloorNanos());
        }
    }

    @Test
    void timingPayloadsRoundTripAndABadFloorIsRefused() throws Exception {
        var t = new FeedProtocol.Timing(1, 2, 3, 4);
        assertEquals(FeedProtocol.Timing.HEADSPACE_BYTES, t.encode().remaining());
        assertEquals(t, FeedProtocol.Timing.decode(t.encode()));
        var plain = new FeedProtocol.Timing(1, 2);
        assertFalse(plain.hasHeadspace());
        assertEquals(FeedProtocol.Timing.BYTES, plain.encode().remaining());
        var noSteps = ByteBuffer.allocate(32).order(ByteOrder.LITTLE_ENDIAN).putLong(1).putLong(2).putLong(3).putLong(0).flip();
        var e = assertThrows(FeedProtocol.ProtocolException.class, () -> FeedProtocol.Timing.decode(noSteps));
        assertTrue(e.getMessage().contains("floor_steps 0"), e.getMessage());
        // a WELCOME of before the features field reads as offering none
        var old = new FeedProtocol.Welcome(5, 0, 0, 0, 1, 10, 0, 0, 10, 1, FeedProtocol.FEATURES).encode().limit(72);
        var w = FeedProtocol.Welcome.decode(old);
        assertFalse(w.takesHeadspace());
    }
}
