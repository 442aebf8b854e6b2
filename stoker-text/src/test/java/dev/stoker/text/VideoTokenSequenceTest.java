package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link TokenSequenceBuilder} with videos: truncation treats a video as an image (never cut inside it, dropped with
 * what follows), bad video inputs are refused naming the sample, and Qwen3 timestamps are written as Python writes
 * them. The exact arrays are held by {@link VideoTokenFixturesTest} and {@link VideoVectorsTest}.
 */
@Timeout(60)
class VideoTokenSequenceTest {
    private static final SampleParser PARSER = new SampleParser(SampleParser.Videos.ACCEPT);
    private static QwenTokenizer tokenizer;

    @BeforeAll
    static void open() { tokenizer = QwenTokenizer.bundled(); }

    @AfterAll
    static void close() { tokenizer.close(); }

    private static ChatSample sample(String json) {
        return PARSER.parseLine(json.getBytes(StandardCharsets.UTF_8), "s-1");
    }

    private static TokenSequenceBuilder builder(ProcessorPreset preset, VideoContract contract, int maxLength, TruncationPolicy policy) {
        return TokenSequenceBuilder.forPreset(tokenizer, preset, maxLength, policy).withVideo(preset, contract);
    }

    /** Qwen2.5: text, a video of 2·2·4 = 16 tokens, text, an image of 4 tokens, an answer. */
    private static final String QWEN25 = """
        {"messages": [{"role": "user", "content": "Clip: <video> and photo <image> alike?"}, {"role": "assistant", "content": "Yes, both."}],
         "videos": ["a.mp4"], "images": ["b.png"]}""";
    private static final List<long[]> IMAGE = List.of(new long[] {1, 4, 4});
    private static final List<VideoTokens> VIDEO = List.of(VideoTokens.qwen25(2, 4, 8, 1.0f));

    private static int indexOf(long[] ids, long token, int from) {
        for (int i = from; i < ids.length; i++) if (ids[i] == token) return i;
        return -1;
    }

    @Test
    void aCutInsideAVideoMovesBeforeItAndDropsItAndWhatFollows() {
        var s = sample(QWEN25);
        var full = builder(ProcessorPreset.QWEN2_5_VL, VideoContract.OFFICIAL, 8192, TruncationPolicy.TRUNCATE).build(s, IMAGE, VIDEO);
        int vs = indexOf(full.inputIds(), QwenTokenIds.VISION_START, 0);
        assertEquals(QwenTokenIds.VIDEO_PAD, full.inputIds()[vs + 1]);
        int ve = vs + 1 + 16;
        assertEquals(QwenTokenIds.VISION_END, full.inputIds()[ve]);
        int imageVs = indexOf(full.inputIds(), QwenTokenIds.VISION_START, ve);

        for (int max : new int[] {vs + 1, vs + 9, ve}) {   // cut after the video's <|vision_start|> … at its <|vision_end|>
            var b = builder(ProcessorPreset.QWEN2_5_VL, VideoContract.OFFICIAL, max, TruncationPolicy.TRUNCATE);
            var f = b.build(s, IMAGE, VIDEO);
            assertEquals(vs, f.length(), "cut at the video's <|vision_start|> for limit " + max);
            assertEquals(0, f.videosKept());
            assertEquals(0, f.imagesKept());
            assertArrayEquals(Arrays.copyOf(full.inputIds(), vs), f.inputIds());
            assertEquals(vs, b.measure(s, IMAGE, VIDEO).length());
        }
        var whole = builder(ProcessorPreset.QWEN2_5_VL, VideoContract.OFFICIAL, ve + 1, TruncationPolicy.TRUNCATE).build(s, IMAGE, VIDEO);
        assertEquals(ve + 1, whole.length());
        assertEquals(1, whole.videosKept());
        assertEquals(0, whole.imagesKept());
        assertArrayEquals(Arrays.copyOf(full.positionIds(), ve + 1), Arrays.copyOf(whole.positionIds(), ve + 1), "temporal row of the kept video");

        var imageCut = builder(ProcessorPreset.QWEN2_5_VL, VideoContract.OFFICIAL, imageVs + 2, TruncationPolicy.TRUNCATE).build(s, IMAGE, VIDEO);
        assertEquals(imageVs, imageCut.length());
        assertEquals(1, imageCut.videosKept());
        assertEquals(0, imageCut.imagesKept());

        var e = assertThrows(SampleException.class,
                () -> builder(ProcessorPreset.QWEN2_5_VL, VideoContract.OFFICIAL, 20, TruncationPolicy.REJECT).build(s, IMAGE, VIDEO));
        assertEquals(SampleException.Kind.FILTERED, e.kind());
        assertTrue(e.getMessage().contains("(1 image(s), 1 video(s))"), e.getMessage());
    }

    /** Qwen3: the video is its timestamped groups; under 5.18 inside the template's vision_start/end, under 4.57 from its first timestamp. */
    @Test
    void aQwen3VideoIsCutBeforeItsFirstTimestampOrItsOuterVisionStart() {
        var s = sample("""
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "Look: "}, {"type": "video", "video": "a.mp4"},
              {"type": "text", "text": " What?"}]}, {"role": "assistant", "content": "A pan."}]}""");
        var video = List.of(VideoTokens.qwen3(3, 4, 4, new double[] {0.5, 1.5, 2.75}));
        for (var contract : List.of(VideoContract.TRANSFORMERS_5_18, VideoContract.TRANSFORMERS_4_57)) {
            var full = builder(ProcessorPreset.QWEN3_VL, contract, 8192, TruncationPolicy.TRUNCATE).build(s, List.of(), video);
            int lastGroupEnd = -1;
            for (int i = 0; i < full.length(); i++) if (full.inputIds()[i] == QwenTokenIds.VIDEO_PAD) lastGroupEnd = i + 1;
            int end = contract == VideoContract.TRANSFORMERS_5_18 ? lastGroupEnd + 1 : lastGroupEnd;
            assertEquals(QwenTokenIds.VISION_END, full.inputIds()[end]);
            var cuts = new java.util.TreeSet<Integer>();
            for (int max = 8; max <= end; max++) {
                var f = builder(ProcessorPreset.QWEN3_VL, contract, max, TruncationPolicy.TRUNCATE).build(s, List.of(), video);
                assertEquals(0, f.videosKept(), contract + " limit " + max);
                assertArrayEquals(Arrays.copyOf(full.inputIds(), f.length()), f.inputIds());
                if (f.length() < max) cuts.add(f.length());
            }
            assertEquals(1, cuts.size(), contract + ": every cut inside the video lands at one place " + cuts);
            int cut = cuts.first();
            String kept = tokenizer.decode(Arrays.copyOf(full.inputIds(), cut));
            if (contract == VideoContract.TRANSFORMERS_5_18) {
                assertEquals(QwenTokenIds.VISION_START, full.inputIds()[cut], "5.18: at the template's <|vision_start|>");
                assertTrue(kept.endsWith("Look: "), kept);
            } else {
                // 4.57 writes "Look: <0.5 seconds>": the space and '<' are one token, so the cut also takes the space
                assertTrue(kept.endsWith("Look:"), kept);
                assertTrue(tokenizer.decode(Arrays.copyOfRange(full.inputIds(), cut, cut + 1)).startsWith(" <"));
            }
            assertEquals(1, builder(ProcessorPreset.QWEN3_VL, contract, end + 1, TruncationPolicy.TRUNCATE)
                    .build(s, List.of(), video).videosKept());
        }
    }

    private static String textError(org.junit.jupiter.api.function.Executable run) {
        var e = assertThrows(SampleException.class, run);
        assertEquals("s-1", e.sampleId());
        assertEquals(SampleException.Stage.TEXT, e.stage());
        return e.getMessage();
    }

    @Test
    void videoInputsThatDoNotFitTheSampleAreRefusedNamingIt() {
        var s = sample(QWEN25);
        var b = builder(ProcessorPreset.QWEN2_5_VL, VideoContract.OFFICIAL, 8192, TruncationPolicy.REJECT);
        assertEquals("1 video(s) in the chat but 0 video token record(s)",
                textError(() -> b.build(s, IMAGE)));
        assertEquals("video 0: Qwen2.5-VL needs a positive second_per_grid_t, got NaN",
                textError(() -> b.build(s, IMAGE, List.of(VideoTokens.qwen2(2, 4, 8)))));
        assertEquals("video 0: grid [2, 4, 5] is not divisible by the merge size 2",
                textError(() -> b.build(s, IMAGE, List.of(VideoTokens.qwen25(2, 4, 5, 1f)))));
        var q3 = builder(ProcessorPreset.QWEN3_VL, VideoContract.OFFICIAL, 8192, TruncationPolicy.REJECT);
        assertEquals("video 0: Qwen3-VL needs one timestamp per temporal patch: 0 for t = 2",
                textError(() -> q3.build(s, IMAGE, List.of(VideoTokens.qwen2(2, 4, 8)))));
        var none = new TokenSequenceBuilder(tokenizer, ProcessorPreset.ChatFamily.QWEN2_VL, 2, 8192, TruncationPolicy.REJECT);
        assertThrows(IllegalStateException.class, () -> none.build(s, IMAGE, VIDEO), "no video rules set");
        assertThrows(IllegalArgumentException.class, () -> none.withVideo(ProcessorPreset.QWEN3_VL, VideoContract.OFFICIAL),
                "a Qwen3 model with a Qwen2 template");
    }

    @Test
    void textThatSpellsOutAVideoPadIsRefused() {
        var b = builder(ProcessorPreset.QWEN2_5_VL, VideoContract.OFFICIAL, 8192, TruncationPolicy.REJECT);
        var textOnly = sample("{\"messages\": [{\"role\": \"user\", \"content\": \"<|video_pad|> hi\"}]}");
        assertEquals("the rendered chat has 1 <|video_pad|> for 0 video(s): message text contains vision special tokens",
                textError(() -> b.build(textOnly, List.of())));
        var withVideo = sample("{\"messages\": [{\"role\": \"user\", \"content\": \"<video> and <|vision_start|><|video_pad|>\"}], \"videos\": [\"a\"]}");
        textError(() -> b.build(withVideo, List.of(), VIDEO));
    }

    @Test
    void onlyTheCheckedTransformersReleasesMapToAContract() {
        assertEquals(VideoContract.TRANSFORMERS_4_57, VideoContract.forTransformers(4, 57));
        assertEquals(VideoContract.TRANSFORMERS_5_18, VideoContract.forTransformers(5, 18));
        for (int[] v : new int[][] {{4, 56}, {5, 3}, {5, 19}, {5, -1}, {6, 0}})
            assertTrue(assertThrows(IllegalArgumentException.class, () -> VideoContract.forTransformers(v[0], v[1]))
                    .getMessage().startsWith("video tokens are known for transformers 4.57 and 5.18"));
    }

    @Test
    void timestampsAreWrittenAsPythonsPointOneFormatDoes() {
        // Python 3: f"{t:.1f}" for these values (half to even on the exact binary value)
        String[] python = {"0.2", "0.3", "1.2", "2.8", "0.1", "0.1", "12.4", "3.0"};
        double[] t = {0.25, 0.35, 1.25, 2.75, 0.05, 0.15, 12.45, 3.0};
        for (int i = 0; i < t.length; i++) assertEquals("<" + python[i] + " seconds>", VideoTokens.timestampText(t[i]), "t = " + t[i]);
        assertThrows(IllegalArgumentException.class, () -> VideoTokens.timestampText(-0.04));
        assertThrows(IllegalArgumentException.class, () -> new VideoTokens(2, 4, 4, Float.NaN, List.of("<1.0 seconds>")));
        assertThrows(IllegalArgumentException.class, () -> new VideoTokens(1, 4, 4, Float.NaN, List.of("1.0 seconds")));
    }
}
