package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.core.batch.Tensor;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.node.StokerNode;
import dev.stoker.pipeline.EncodeOptions.PixelFormat;
import dev.stoker.pipeline.batch.BatchSchema;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.TrainerClient;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.memory.RootAllocator;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * One tensor schema: the same tensor names in the same order ({@link BatchSchema#names}) from every
 * mode and every delivery path, in both pixel formats — the heap modes (serial, concurrent, prefetch)
 * copied through the socket and sent over Arrow Flight, zero-copy by reference, copied through the
 * socket and over Flight, and a two-node cluster job whose ranks lease batches made on their node or
 * pull them over Flight from the other.
 */
@Tag("slow")
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class TensorOrderTest {
    static final int RANKS = 2, BATCH = 2;
    @TempDir static Path tmp;
    static Path manifest;

    @BeforeAll
    static void data() throws IOException {
        manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), 16, 5);
    }

    static NodeConfig.Builder config(PixelFormat format, String name) throws IOException {
        return NodeConfig.builder().data(manifest.toString()).ranks(RANKS).batch(BATCH).processor(ProcessorPreset.QWEN2_VL).pixels(3136, 50176)
                .pixelFormat(format).threads(1).warmUpMillis(0).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .shmBudgetBytes(256L << 20).set(NodeConfig.MAX_IMAGES, 1).socket(tmp.resolve(name + ".sock")).set(NodeConfig.JOB, name);
    }

    static List<String> names(BatchLayout.Batch b) { return b.tensors().stream().map(Tensor::name).toList(); }

    @ParameterizedTest
    @EnumSource(PixelFormat.class)
    void everyModeAndPathYieldsTheSchemasNamesInItsOrder(PixelFormat format) throws Exception {
        var expected = BatchSchema.names(format);
        var seen = new LinkedHashMap<String, List<String>>();
        for (var mode : List.of(FeedMode.ZERO_COPY, FeedMode.PREFETCH)) {
            String name = name(mode, format);
            try (var node = StokerNode.launch(config(format, name).mode(mode).flight("127.0.0.1:0").build())) {
                try (var c = TrainerClient.connect(node.socket(), 0, RANKS, name, TrainerClient.Options.SHARED_MEMORY); var b = c.next()) {
                    seen.put(mode + " socket (" + (c.sharedMemory() ? "reference" : "copy") + ")", names(b.batch()));
                }
                try (var c = TrainerClient.connect(node.socket(), 0, RANKS, name, TrainerClient.Options.COPY); var b = c.next()) {
                    seen.put(mode + " socket (copy)", names(b.batch()));
                }
                int port = Integer.parseInt(node.flightUrl().substring(node.flightUrl().lastIndexOf(':') + 1));
                try (var alloc = new RootAllocator(); var client = FlightBatchClient.connect("127.0.0.1", port, alloc)) {
                    seen.put(mode + " flight", names(client.next(1, RANKS, name)));
                }
            }
        }
        for (var mode : List.of(FeedMode.SERIAL, FeedMode.CONCURRENT)) { // the ladder's first rungs
            String name = name(mode, format);
            try (var feeds = NodeFeeds.open(config(format, name).build()); var ledger = feeds.start(mode, null);
                 var server = new FeedServer(tmp.resolve(name + "-ladder.sock"), ledger, false);
                 var c = TrainerClient.connect(server.socketPath(), 0, RANKS, name); var b = c.next()) {
                seen.put(mode + " socket (copy)", names(b.batch()));
            }
        }
        seen.putAll(cluster(format));
        assertTrue(seen.size() >= 10, seen.keySet().toString());
        for (var e : seen.entrySet()) assertEquals(expected, e.getValue(), e.getKey());
    }

    /** A two-node cluster on loopback: a member and this node coordinating, two workers spread, both ranks on this node. */
    static Map<String, List<String>> cluster(PixelFormat format) throws Exception {
        int memberPort = freePort(), coordinatorPort = freePort();
        String member = "127.0.0.1:" + memberPort, name = name(FeedMode.ZERO_COPY, format) + "-cluster";
        var memberConfig = NodeConfig.builder().set(NodeConfig.JOIN, List.of(member)).set(NodeConfig.BIND, member).set(NodeConfig.SLOTS, 1)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(tmp.resolve("shm-member-" + format))).set(NodeConfig.NODE_SHM_BUDGET, 256L << 20)
                .socket(tmp.resolve(name + "-member.sock")).build();
        var coordinatorConfig = config(format, name).set(NodeConfig.JOIN, List.of(member)).set(NodeConfig.BIND, "127.0.0.1:" + coordinatorPort)
                .set(NodeConfig.SLOTS, 1).set(NodeConfig.NODES, 2).set(NodeConfig.WORKERS, 2)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(tmp.resolve("shm-coord-" + format))).set(NodeConfig.NODE_SHM_BUDGET, 256L << 20)
                .build();
        var out = new LinkedHashMap<String, List<String>>();
        try (var m = ClusteredNode.launchMember(memberConfig, line -> {});
             var c = ClusteredNode.launchCoordinator(coordinatorConfig, line -> {})) {
            for (int r = 0; r < RANKS; r++) {
                try (var t = TrainerClient.connect(c.socket(), r, RANKS, name, TrainerClient.Options.SHARED_MEMORY)) {
                    for (int s = 0; s < 2; s++) // rank r's step s is made by worker (r + s) mod 2: one here, one on the member
                        try (var b = t.next()) {
                            out.put("cluster rank " + r + " step " + s, names(b.batch()));
                        }
                }
            }
            assertTrue(pulled(c) > 0, "some batches were pulled over Flight from the member");
        }
        return out;
    }

    static int freePort() throws IOException {
        try (var s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    /** A job name per mode and format. */
    static String name(FeedMode mode, PixelFormat format) { return (mode + "-" + format).toLowerCase(java.util.Locale.ROOT).replace('_', '-'); }

    /** Batches the cluster's nodes pulled over Flight, from the coordinator's counters. */
    static long pulled(StokerNode coordinator) {
        long n = 0;
        for (Object s : (List<?>) coordinator.metrics().get("nodes")) n += ((NodeProtocol.NodeStats) s).pulledBatches();
        return n;
    }
}
