package dev.stoker.cli;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.encode.validate.LengthIndex;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.source.mix.DataSources;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The clips' frames in {@code stoker validate}'s length index (format 4, issue 32): over {@link AudioFamiliesServeTest#RECORDS}
 * (clips made by FFmpeg at test time), under Qwen2.5-Omni with {@code --audio-pad valid} and {@code hf}, the index validate
 * writes holds each record's clips' frames equal to the start-up header scan's ({@code SampleShape.clipFrames}), the two pads
 * have an index each, and a serve of the job sizes its shared memory from the index — no scan — to the same largest batch
 * the scan gives.
 */
@Tag("slow")
@Timeout(120)
class AudioLengthIndexTest {
    static final int RECORDS = 5;
    @TempDir static Path tmp;
    private static Path manifest;

    @BeforeAll
    static void data() throws Exception {
        AudioServeTest.makeClips(Files.createDirectories(tmp.resolve("data/clips")));
        manifest = Files.writeString(tmp.resolve("data/audio.json"), AudioFamiliesServeTest.RECORDS);
    }

    private static NodeConfig config(String pad, Path lengths) throws Exception {
        return NodeConfig.builder().data(manifest.toString()).set("processor", "qwen2.5-omni").set("audio-pad", pad).ranks(1).batch(RECORDS)
                .steps(1).set(NodeConfig.MAX_SEQ_LEN, 512).set(NodeConfig.INDEX_CACHE, lengths.toString()).threads(2).build();
    }

    @ParameterizedTest
    @ValueSource(strings = {"valid", "hf"})
    void validatesIndexHoldsTheScansClipFramesAndSizesSharedMemoryWithoutAScan(String pad) throws Exception {
        Path lengths = Files.createDirectories(tmp.resolve("lengths-" + pad));
        var config = config(pad, lengths);
        // before validate: the scan
        long scanned;
        try (var feeds = NodeFeeds.open(config)) {
            var shm = feeds.shmBudget(line -> {});
            assertTrue(shm.dataSource().startsWith("a header scan of " + RECORDS + " records"), shm.dataSource());
            scanned = shm.largestBatchBytes();
        }
        var r = CliRunner.run("validate", "--data", manifest.toString(), "--processor", "qwen2.5-omni", "--audio-pad", pad,
                "--max-seq-len", "512", "--lengths-dir", lengths.toString());
        assertEquals(0, r.status(), r.err());
        var files = new ArrayList<Path>();
        try (var list = Files.list(lengths)) {
            list.filter(f -> f.getFileName().toString().startsWith("lengths-")).forEach(files::add);
        }
        assertEquals(1, files.size(), files.toString());
        var index = LengthIndex.read(files.get(0));
        assertEquals(pad, ((java.util.Map<?, ?>) index.settings().get("audio")).get("pad"), "the pad is part of the key");
        assertEquals(5, index.clipFrames().length, "WAV, MP3, two clips, FLAC: five clips, the text-only record none");
        try (var sources = DataSources.open(config.sources(), config.sourceConfig(), config.indexCache());
             var tokenizer = NodeFeeds.tokenizer(null)) {
            var source = sources.feedSource();
            var records = source.records();
            var scan = dev.stoker.encode.validate.ShapeIndexes.measure(records, source, tokenizer, config.encodeOptions(), 1);
            var loaded = NodeFeeds.shapes(config, source, records, tokenizer, null, line -> {});
            for (int i = 0; i < RECORDS; i++) {
                assertArrayEquals(scan.shape(i).clipFrames(), loaded.shape(i).clipFrames(), "record " + i);
                assertArrayEquals(scan.shape(i).clipFrames(), index.clipFrames(i), "record " + i);
                if (pad.equals("hf") && index.clips(i) > 0) assertEquals(30_000, index.clipFrames(i)[0], "hf: 300 s a clip");
            }
        }
        // after validate: shared memory sized from the index, no scan, to the scan's bound
        try (var feeds = NodeFeeds.open(config)) {
            var said = new ArrayList<String>();
            var shm = feeds.shmBudget(said::add);
            assertTrue(shm.dataSource().startsWith("stoker validate's length index in "), shm.dataSource());
            assertEquals(scanned, shm.largestBatchBytes(), "the index's bound is the scan's");
            assertTrue(said.stream().noneMatch(l -> l.contains("scan")), said.toString());
        }
    }
}
