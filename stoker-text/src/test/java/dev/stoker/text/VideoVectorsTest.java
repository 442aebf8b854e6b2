package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.testkit.Vectors;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.Timeout;

/**
 * The Qwen-VL video vectors ({@code shared/vectors/qwen-vl-video}, transformers 5.18.0): for every case, the sample
 * in the HF layout and in the LLaMA-Factory layout parse to the same chat, which renders as {@code case.json}'s text,
 * and from the case's grids, {@code second_per_grid_ts} and timestamps Stoker's {@code input_ids}, {@code labels},
 * {@code attention_mask} and {@code position_ids} under {@link VideoContract#TRANSFORMERS_5_18} equal the case's .npy
 * exactly; the timestamp texts Stoker formats from the case's timestamps equal the case's (correction 9). Skipped
 * where the shared folder is absent (a user's clone); {@link VideoTokenFixturesTest} holds the same rules without it.
 */
@Timeout(60)
class VideoVectorsTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static QwenTokenizer tokenizer;

    @BeforeAll
    static void open() { tokenizer = QwenTokenizer.bundled(); }

    @AfterAll
    static void close() { tokenizer.close(); }

    static Path vectors() {
        var prop = System.getProperty("stoker.shared.dir");
        Path shared = prop == null ? Vectors.projectDir().resolve("../shared") : Path.of(prop);
        return shared.resolve("vectors/qwen-vl-video").normalize();
    }

    @TestFactory
    Stream<DynamicTest> everyCaseMatchesItsArrays() throws Exception {
        var dir = vectors();
        Assumptions.assumeTrue(Files.isRegularFile(dir.resolve("MANIFEST.json")), "no Qwen-VL video vectors at " + dir + " (-Dstoker.shared.dir)");
        var cases = new ArrayList<Path>();
        try (var list = Files.list(dir)) {
            list.filter(p -> p.getFileName().toString().matches("d\\d\\d_.*") && Files.isRegularFile(p.resolve("case.json")))
                    .sorted().forEach(cases::add);
        }
        assertEquals(16, cases.size(), "the vectors' 16 cases");
        return cases.stream().map(c -> DynamicTest.dynamicTest(c.getFileName().toString(), () -> check(c)));
    }

    private static void check(Path dir) throws Exception {
        var c = JSON.readTree(dir.resolve("case.json").toFile());
        var id = c.get("id").asText();
        var parser = new SampleParser(SampleParser.Videos.ACCEPT);
        var sample = parser.parseLine(Files.readAllBytes(dir.resolve("sample.json")), id);
        var lf = dir.resolve("sample_llamafactory.json");
        if (Files.exists(lf)) assertEquals(sample, parser.parseLine(Files.readAllBytes(lf), id), "LLaMA-Factory layout: same chat");
        var written = new ArrayList<String>();   // image and video items in the order sample.json writes them
        for (var m : c.get("sample").get("messages"))
            for (var item : m.path("content"))
                if (item.has("image") || item.has("video")) written.add(item.has("image") ? item.get("image").asText() : item.get("video").asText());
        assertEquals(written, sample.media().stream().map(VideoVectorsTest::mediaRef).toList(), "media order");
        if (c.hasNonNull("expected_error")) {   // d16: the sampler's error; the tokens are never made
            assertEquals(14L, sample.videos().getFirst().options().get("nframes"), "per-item key carried");
            return;
        }
        assertEquals(c.get("videos").size(), sample.videos().size());
        for (int v = 0; v < sample.videos().size(); v++)
            assertEquals(c.get("videos").get(v).get("file").asText(), sample.videos().get(v).ref());

        var preset = ProcessorPreset.fromName(c.get("family").asText());
        var grids = new ArrayList<long[]>();
        if (Files.exists(dir.resolve("image_grid_thw.npy"))) {
            var g = Npy.read(dir.resolve("image_grid_thw.npy")).asLongs();
            for (int i = 0; i < g.length; i += 3) grids.add(new long[] {g[i], g[i + 1], g[i + 2]});
        }
        var spg = Files.exists(dir.resolve("second_per_grid_ts.npy")) ? Npy.read(dir.resolve("second_per_grid_ts.npy")).asFloats() : null;
        var videos = new ArrayList<VideoTokens>();
        for (int v = 0; v < c.get("videos").size(); v++) videos.add(tokens(c.get("videos").get(v), preset, spg == null ? Float.NaN : spg[v]));

        var builder = TokenSequenceBuilder.forPreset(tokenizer, preset, 8192, TruncationPolicy.REJECT)
                .withVideo(preset, VideoContract.TRANSFORMERS_5_18);
        assertEquals(c.get("text").asText(), builder.template().render(sample.messages()), "rendered template");
        var f = builder.build(sample, grids, videos);
        assertEquals(c.get("num_tokens").asInt(), f.length());
        assertArrayEquals(npy(dir, "input_ids"), f.inputIds(), "input_ids");
        assertArrayEquals(npy(dir, "labels"), f.labels(), "labels");
        assertArrayEquals(npy(dir, "attention_mask"), f.attentionMask(), "attention_mask");
        assertArrayEquals(npy(dir, "position_ids"), f.positionIds(), "position_ids");
    }

    private static String mediaRef(Message.Part p) {
        return p instanceof Message.Image i ? i.ref() : ((Message.Video) p).ref();
    }

    /** The case's video as the sampler would hand it over, its Qwen3 timestamp texts formatted here and checked. */
    private static VideoTokens tokens(JsonNode v, ProcessorPreset preset, float spg) {
        var g = v.get("video_grid_thw");
        long t = g.get(0).asLong(), h = g.get(1).asLong(), w = g.get(2).asLong();
        return switch (preset) {
            case QWEN2_VL -> VideoTokens.qwen2(t, h, w);
            case QWEN2_5_VL -> {
                assertEquals((float) v.get("second_per_grid_t").asDouble(), spg, "second_per_grid_t: case.json vs .npy");
                yield VideoTokens.qwen25(t, h, w, spg);
            }
            case QWEN3_VL -> {
                var seconds = new double[v.get("timestamps").size()];
                for (int i = 0; i < seconds.length; i++) seconds[i] = v.get("timestamps").get(i).asDouble();
                var made = VideoTokens.qwen3(t, h, w, seconds);
                var expected = new ArrayList<String>();
                for (var s : v.get("timestamp_text")) expected.add(s.asText());
                assertEquals(expected, made.timestampTexts(), "timestamp texts (Python's .1f, half to even)");
                yield made;
            }
            case QWEN2_AUDIO, QWEN2_5_OMNI, QWEN3_OMNI -> throw new AssertionError("the video vectors are the Qwen-VL families': " + preset);
        };
    }

    private static long[] npy(Path dir, String name) throws Exception {
        return Npy.read(dir.resolve(name + ".npy")).asLongs();
    }
}
