package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.node.StokerNode;
import dev.stoker.encode.EncodeOptions.InputContract;
import dev.stoker.encode.EncodeOptions.PixelFormat;
import dev.stoker.encode.EncodeOptions.TextOnlyPolicy;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.testkit.BatchDigest;
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
 * One tensor schema: the same tensor names in the same order ({@link BatchSchema#names}), the model inputs
 * apart from the batch's metadata (each descriptor's flag), from every mode and every delivery path, in both pixel
 * formats — the heap modes (serial, concurrent, prefetch) copied through the socket and sent over Arrow Flight,
 * zero-copy by reference, copied through the socket and over Flight, and a two-node cluster job whose ranks lease
 * batches made on their node or pull them over Flight from the other. A rank's step is the same batch, byte for byte,
 * on every path. Most samples have no image: in the compact format many batches carry the dummy image of
 * {@code --text-only dummy-image} (the default) on every path, the cluster's pulls and Flight included; in the float32
 * format, run with {@code --text-only allow --transformers 5.18}, many batches have no image and flag their empty
 * {@code pixel_values} and {@code image_grid_thw} as metadata on every path (docs/model-inputs.md §8, R5), and every
 * batch carries {@code mm_token_type_ids} after {@code position_ids}, equal to the rule on every path (R3).
 */
@Tag("slow")
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class TensorOrderTest {
    static final int RANKS = 2, BATCH = 2;
    @TempDir static Path tmp;
    static Path manifest;
    /** A batch's digest by rank and global step, from the first path that delivered it. */
    static final Map<String, String> digests = new java.util.concurrent.ConcurrentHashMap<>();
    /** Batches with the dummy image, by path. */
    static final Map<String, Integer> dummies = new java.util.concurrent.ConcurrentHashMap<>();
    /** Batches without any image, by path. */
    static final Map<String, Integer> imageless = new java.util.concurrent.ConcurrentHashMap<>();

    /** What a run feeds: a pixel format, with the text-only policy and transformers release it is run with. */
    enum Case {
        FLOAT32_ALLOW_5_18(PixelFormat.FLOAT32, TextOnlyPolicy.ALLOW, "5.18"), UINT8_DUMMY_IMAGE(PixelFormat.UINT8, TextOnlyPolicy.DUMMY_IMAGE, null);

        final PixelFormat format;
        final TextOnlyPolicy textOnly;
        final String transformers;

        Case(PixelFormat format, TextOnlyPolicy textOnly, String transformers) {
            this.format = format;
            this.textOnly = textOnly;
            this.transformers = transformers;
        }

        boolean mmTokenTypeIds() { return transformers != null; }
    }

    @BeforeAll
    static void data() throws IOException {
        Path demo = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), 16, 5);
        var lines = new StringBuilder(Files.readString(demo));
        for (int i = 0; i < 48; i++) // three in four samples text-only
            lines.append("{\"id\": \"text-").append(i).append("\", \"conversations\": [{\"from\": \"human\", \"value\": \"Say ")
                    .append(i).append(".\"}, {\"from\": \"gpt\", \"value\": \"").append(i).append(".\"}]}\n");
        manifest = Files.writeString(demo.resolveSibling("mixed.jsonl"), lines);
    }

    static NodeConfig.Builder config(Case c, String name) throws IOException {
        var b = config(c.format, name).textOnly(c.textOnly);
        return c.transformers == null ? b : b.set("transformers", c.transformers);
    }

    static NodeConfig.Builder config(PixelFormat format, String name) throws IOException {
        return NodeConfig.builder().data(manifest.toString()).ranks(RANKS).batch(BATCH).processor(ProcessorPreset.QWEN2_VL).pixels(3136, 50176)
                .pixelFormat(format).threads(1).warmUpMillis(0).shmDir(Files.createDirectories(tmp.resolve("shm-" + name)))
                .shmBudgetBytes(256L << 20).set(NodeConfig.MAX_IMAGES, 1).socket(tmp.resolve(name + ".sock")).set(NodeConfig.JOB, name);
    }

    /**
     * The batch's tensor names as laid out, the metadata's marked "metadata:" (the descriptor's flag, kept on every path),
     * checked against {@link #expected} for the batch's images; its digest must be the one every other path gave the same
     * rank and step, and its {@code mm_token_type_ids}, where it has them, the rule applied to its {@code input_ids}.
     */
    static List<String> names(String path, BatchLayout.Batch b, Case c) {
        String digest = BatchDigest.of(b), key = "rank " + b.meta().rank() + " step " + b.meta().globalStep();
        assertEquals(digests.computeIfAbsent(key, k -> digest), digest, path + ": " + key + " is the same batch on every path");
        String kind = path.contains("cluster") ? "cluster" : path.contains("flight") ? "flight" : "socket";
        long[] grid = b.tensor("image_grid_thw").toLongs();
        if (java.util.Arrays.equals(new long[] {1, 4, 4}, grid)) dummies.merge(kind, 1, Integer::sum); // a white 64² at these bounds; no photo is so small
        if (grid.length == 0 && b.meta().batchSize() > 0) imageless.merge(kind, 1, Integer::sum);
        if (c.mmTokenTypeIds()) {
            long[] ids = b.tensor("input_ids").toLongs(), types = b.tensor("mm_token_type_ids").toLongs();
            for (int k = 0; k < ids.length; k++) assertEquals(ids[k] == 151655 ? 1 : ids[k] == 151656 ? 2 : 0, types[k], path + " " + key + " R3 at " + k);
        }
        var names = b.tensors().stream().map(t -> (t.metadata() ? "metadata:" : "") + t.name()).toList();
        assertEquals(expected(c, grid.length / 3), names, path + ": " + key);
        assertEquals(BatchSchema.names(c.format, c.mmTokenTypeIds() ? InputContract.TRANSFORMERS_5_3 : InputContract.QWEN_VL_FINETUNE),
                names.stream().map(n -> n.replace("metadata:", "")).toList(), path + ": the schema's order");
        return names;
    }

    /**
     * What {@link #names} must give in case {@code c} for a batch of {@code images} images, written out: the model inputs
     * (with mm_token_type_ids under the 5.3 contract), whose vision tensors are metadata in a batch without images, then
     * the metadata.
     */
    static List<String> expected(Case c, int images) {
        String vision = images == 0 ? "metadata:" : "";
        var out = new ArrayList<>(List.of("input_ids", "labels", "attention_mask", "position_ids"));
        if (c.mmTokenTypeIds()) out.add("mm_token_type_ids");
        out.addAll(List.of(vision + (c.format == PixelFormat.UINT8 ? "pixel_values_u8" : "pixel_values"), vision + "image_grid_thw",
                "metadata:sample_index"));
        if (c.format == PixelFormat.UINT8) out.addAll(List.of("metadata:pixel_norm", "metadata:pixel_patch"));
        return out;
    }

    @ParameterizedTest
    @EnumSource(Case.class)
    void everyModeAndPathYieldsTheSchemasNamesInItsOrder(Case run) throws Exception {
        var format = run.format;
        digests.clear();
        dummies.clear();
        imageless.clear();
        var seen = new LinkedHashMap<String, List<String>>();
        for (var mode : List.of(FeedMode.ZERO_COPY, FeedMode.PREFETCH)) {
            String name = name(mode, format);
            try (var node = StokerNode.launch(config(run, name).mode(mode).flight("127.0.0.1:0").build())) {
                try (var c = TrainerClient.connect(node.socket(), 0, RANKS, name, TrainerClient.Options.SHARED_MEMORY); var b = c.next()) {
                    String path = mode + " socket (" + (c.sharedMemory() ? "reference" : "copy") + ")";
                    seen.put(path, names(path, b.batch(), run));
                }
                try (var c = TrainerClient.connect(node.socket(), 0, RANKS, name, TrainerClient.Options.COPY); var b = c.next()) {
                    seen.put(mode + " socket (copy)", names(mode + " socket (copy)", b.batch(), run));
                }
                int port = Integer.parseInt(node.flightUrl().substring(node.flightUrl().lastIndexOf(':') + 1));
                try (var alloc = new RootAllocator();
                     var client = FlightBatchClient.connect("127.0.0.1", port, dev.stoker.node.FlightTokenFile.clientOptions(System.getenv()), alloc)) {
                    for (int s = 0; s < 2; s++) seen.put(mode + " flight step " + s, names(mode + " flight", client.next(1, RANKS, name), run));
                }
            }
        }
        for (var mode : List.of(FeedMode.SERIAL, FeedMode.CONCURRENT)) { // the ladder's first rungs
            String name = name(mode, format);
            try (var feeds = NodeFeeds.open(config(run, name).build()); var ledger = feeds.start(mode, null);
                 var server = new FeedServer(tmp.resolve(name + "-ladder.sock"), ledger, false);
                 var c = TrainerClient.connect(server.socketPath(), 0, RANKS, name); var b = c.next()) {
                seen.put(mode + " socket (copy)", names(mode + " ladder socket (copy)", b.batch(), run));
            }
        }
        seen.putAll(cluster(run));
        assertTrue(seen.size() >= 10, seen.keySet().toString());
        if (run.textOnly == TextOnlyPolicy.DUMMY_IMAGE)
            assertTrue(dummies.getOrDefault("flight", 0) > 0 && dummies.getOrDefault("cluster", 0) > 0, "dummy images over Flight and in the cluster " + dummies);
        else
            assertTrue(imageless.getOrDefault("flight", 0) > 0 && imageless.getOrDefault("cluster", 0) > 0,
                    "batches without images over Flight and in the cluster " + imageless);
    }

    /** A two-node cluster on loopback: a member and this node coordinating, two workers spread, both ranks on this node. */
    static Map<String, List<String>> cluster(Case run) throws Exception {
        var format = run.format;
        int memberPort = freePort(), coordinatorPort = freePort();
        String member = "127.0.0.1:" + memberPort, name = name(FeedMode.ZERO_COPY, format) + "-cluster";
        var memberConfig = NodeConfig.builder().set(NodeConfig.JOIN, List.of(member)).set(NodeConfig.BIND, member).set(NodeConfig.SLOTS, 1)
                .set(NodeConfig.NODE_SHM_DIR, Files.createDirectories(tmp.resolve("shm-member-" + format))).set(NodeConfig.NODE_SHM_BUDGET, 256L << 20)
                .socket(tmp.resolve(name + "-member.sock")).build();
        var coordinatorConfig = config(run, name).set(NodeConfig.JOIN, List.of(member)).set(NodeConfig.BIND, "127.0.0.1:" + coordinatorPort)
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
                            out.put("cluster rank " + r + " step " + s, names("cluster", b.batch(), run));
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
