package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.ProcessorPreset;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The token side of video samples under each {@link VideoContract} equals the reference's arrays
 * ({@code ref_qwenvl_video.py} {@code build_sample}'s text path at compat 5.18 / 4.57 / official), stored in
 * {@code video/token_fixtures.json} by {@code tools/video-token-fixtures/make_video_token_fixtures.py}: the 15 cases
 * of {@code shared/vectors/qwen-vl-video} (whose 5.18 arrays the script checked against the vectors' .npy) and three
 * synthetic ones. Needs nothing outside the repository; the same samples in the LLaMA-Factory layout parse to the
 * same chat, and the models' Hub templates (Jinja) render their videos as the built-in renderer does.
 */
@Timeout(60)
class VideoTokenFixturesTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final JsonNode FIXTURES = load();
    private static final java.util.Map<String, JinjaChatRenderer> HUB_TEMPLATES = new java.util.concurrent.ConcurrentHashMap<>();
    private static QwenTokenizer tokenizer;

    @BeforeAll
    static void open() { tokenizer = QwenTokenizer.bundled(); }

    @AfterAll
    static void close() { tokenizer.close(); }

    private static JsonNode load() {
        try (var in = VideoTokenFixturesTest.class.getResourceAsStream("video/token_fixtures.json")) {
            if (in == null) throw new IllegalStateException("missing test resource video/token_fixtures.json");
            return JSON.readTree(in);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static Stream<Arguments> cases() {
        var out = new ArrayList<Arguments>();
        for (var c : FIXTURES.get("cases"))
            for (var compat : List.of("5.18", "4.57", "official")) out.add(Arguments.of(c.get("id").asText(), compat));
        return out.stream();
    }

    static VideoContract contract(String compat) {
        return switch (compat) {
            case "5.18" -> VideoContract.TRANSFORMERS_5_18;
            case "4.57" -> VideoContract.TRANSFORMERS_4_57;
            case "official" -> VideoContract.OFFICIAL;
            default -> throw new IllegalArgumentException(compat);
        };
    }

    /** The {@link VideoTokens} of a fixture's or a case's video: grid, float32 spg (null: none), timestamp texts. */
    static VideoTokens videoTokens(JsonNode v) {
        var g = v.get("grid");
        var spg = v.get("second_per_grid_t");
        var texts = new ArrayList<String>();
        for (var t : v.get("timestamp_texts")) texts.add(t.asText());
        return new VideoTokens(g.get(0).asLong(), g.get(1).asLong(), g.get(2).asLong(),
                spg == null || spg.isNull() ? Float.NaN : (float) spg.asDouble(), texts);
    }

    static long[] longs(JsonNode array) {
        var out = new long[array.size()];
        for (int i = 0; i < out.length; i++) out[i] = array.get(i).asLong();
        return out;
    }

    private static JsonNode fixture(String id) {
        for (var c : FIXTURES.get("cases")) if (c.get("id").asText().equals(id)) return c;
        throw new IllegalArgumentException(id);
    }

    static Stream<String> caseIds() {
        var out = new ArrayList<String>();
        for (var c : FIXTURES.get("cases")) out.add(c.get("id").asText());
        return out.stream();
    }

    /** The models' own chat templates (Hub Jinja, in stoker-testkit) render video items as the built-in renderer does. */
    @ParameterizedTest(name = "{0}")
    @MethodSource("caseIds")
    void theHubTemplatesRenderVideosAsTheBuiltInOne(String id) throws Exception {
        var c = fixture(id);
        var renderer = HUB_TEMPLATES.computeIfAbsent(c.get("family").asText() + "-instruct.jinja", name -> {
            try (var in = VideoTokenFixturesTest.class.getResourceAsStream("/dev/stoker/testkit/templates/" + name)) {
                if (in == null) throw new IllegalStateException("missing template " + name);
                return JinjaChatRenderer.compile(new String(in.readAllBytes(), java.nio.charset.StandardCharsets.UTF_8));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        });
        var sample = new SampleParser(SampleParser.Videos.ACCEPT).parse(c.get("sample"), id);
        assertEquals(c.get("compat").get("5.18").get("text").asText(), renderer.render(sample.messages()));
    }

    @ParameterizedTest(name = "{0} {1}")
    @MethodSource("cases")
    void tokensLabelsAndPositionsEqualTheReference(String id, String compat) throws Exception {
        var c = fixture(id);
        var expected = c.get("compat").get(compat);
        var preset = ProcessorPreset.fromName(c.get("family").asText());
        var parser = new SampleParser(SampleParser.Videos.ACCEPT);
        var sample = parser.parse(c.get("sample"), id);
        if (c.hasNonNull("sample_llamafactory"))
            assertEquals(sample, parser.parse(c.get("sample_llamafactory"), id), "the LLaMA-Factory layout parses to the same chat");

        var grids = new ArrayList<long[]>();
        for (var g : c.get("image_grids")) grids.add(longs(g));
        var videos = new ArrayList<VideoTokens>();
        for (var v : expected.get("videos")) videos.add(videoTokens(v));
        var builder = TokenSequenceBuilder.forPreset(tokenizer, preset, 8192, TruncationPolicy.REJECT).withVideo(preset, contract(compat));

        assertEquals(expected.get("text").asText(), builder.template().render(sample.messages()));
        var f = builder.build(sample, grids, videos);
        assertArrayEquals(longs(expected.get("input_ids")), f.inputIds(), "input_ids");
        assertArrayEquals(longs(expected.get("labels")), f.labels(), "labels");
        assertArrayEquals(longs(expected.get("attention_mask")), f.attentionMask(), "attention_mask");
        var rows = expected.get("position_ids");
        var pos = new long[3 * f.length()];
        for (int r = 0; r < 3; r++) System.arraycopy(longs(rows.get(r)), 0, pos, r * f.length(), f.length());
        assertArrayEquals(pos, f.positionIds(), "position_ids");
        assertEquals(grids.size(), f.imagesKept());
        assertEquals(videos.size(), f.videosKept());
        assertEquals(f.length(), builder.measure(sample, grids, videos).length());
    }
}
