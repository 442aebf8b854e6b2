package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.AudioPreset;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@code --truncation truncate} for the audio families ({@link OmniSequence#build(ChatSample, List, int)}): every cut from
 * the full length down to the first media run is checked against the rule — the ids are the full ids' prefix, cut at the
 * limit or before the media run the limit would split (a clip, an image, a video with its audio interleaved: one run);
 * the kept items are exactly the runs that end before the cut; labels are the official rule's on the cut ids; positions
 * are the full sequence's prefix (the thinkers number a token from the tokens before it only).
 */
@Timeout(60)
class OmniTruncationTest {
    private static final SampleParser PARSER = new SampleParser(SampleParser.Videos.ACCEPT, null, SampleParser.Audios.ACCEPT);
    private static final ObjectMapper JSON = new ObjectMapper();
    private static QwenTokenizer tokenizer;

    @BeforeAll
    static void load() { tokenizer = QwenTokenizer.bundled(); }

    @AfterAll
    static void close() { tokenizer.close(); }

    private static ChatSample sample(String messages) throws Exception {
        return PARSER.parse(JSON.createObjectNode().set("messages", JSON.readTree(messages)), "t");
    }

    /** Each media item's run {first, last} in the full ids, from the family's start and end tokens (nesting counted). */
    private static List<int[]> runs(long[] ids, AudioPreset p) {
        var out = new java.util.ArrayList<int[]>();
        int depth = 0, start = 0;
        for (int i = 0; i < ids.length; i++) {
            boolean open = ids[i] == p.audioStartId() || (p.hasVision() && ids[i] == p.visionStartId());
            boolean close = ids[i] == p.audioEndId() || (p.hasVision() && ids[i] == p.visionEndId());
            if (open && depth++ == 0) start = i;
            if (close && --depth == 0) out.add(new int[] {start, i});
        }
        return out;
    }

    private static void checkEveryCut(AudioPreset preset, ChatSample sample, List<OmniTokens.Media> sizes) {
        var seq = new OmniSequence(preset, tokenizer);
        var full = seq.build(sample, sizes);
        assertEquals(sizes.size(), full.keptMedia());
        var runs = runs(full.inputIds(), preset);
        assertEquals(sizes.size(), runs.size(), "one run per media item");
        int n = full.length();
        var same = seq.build(sample, sizes, n);
        assertArrayEquals(full.inputIds(), same.inputIds(), "at its own length nothing is cut");
        assertEquals(sizes.size(), same.keptMedia());
        for (int max = n - 1; max > runs.getFirst()[0]; max--) {
            var t = seq.build(sample, sizes, max);
            int cut = max;
            for (int[] r : runs) if (r[0] < cut && cut <= r[1]) cut = r[0];
            int kept = 0;
            while (kept < runs.size() && runs.get(kept)[1] < cut) kept++;
            assertEquals(cut, t.length(), "max " + max);
            assertEquals(kept, t.keptMedia(), "max " + max);
            assertArrayEquals(Arrays.copyOf(full.inputIds(), cut), t.inputIds(), "max " + max);
            assertArrayEquals(TokenSequenceBuilder.labels(t.inputIds()), t.labels(), "max " + max);
            for (int r = 0; r < 3; r++) { // 3 rows for every family (Qwen2-Audio's encode keeps row 0)
                if (full.positions() != null)
                    assertArrayEquals(Arrays.copyOfRange(full.positions(), r * n, r * n + cut), Arrays.copyOfRange(t.positions(), r * cut, (r + 1) * cut),
                            "max " + max + " row " + r);
                else
                    assertArrayEquals(Arrays.copyOfRange(full.floatPositions(), r * n, r * n + cut),
                            Arrays.copyOfRange(t.floatPositions(), r * cut, (r + 1) * cut), "max " + max + " row " + r);
            }
        }
    }

    @Test
    void clipsAndImagesAreKeptWholeOrDropped() throws Exception {
        var sample = sample("""
            [{"role": "user", "content": [{"type": "text", "text": "First: "}, {"type": "audio", "audio": "a.wav"},
                                          {"type": "image", "image": "x.jpg"}, {"type": "text", "text": " then "},
                                          {"type": "audio", "audio": "b.wav"}, {"type": "text", "text": " Which is longer?"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "The first one, by a second or so."}]}]""");
        checkEveryCut(AudioPreset.QWEN2_5_OMNI, sample,
                List.of(new OmniTokens.AudioClip(250), new OmniTokens.ImageGrid(1, 4, 6), new OmniTokens.AudioClip(151)));
    }

    @Test
    void aVideoWithItsAudioIsOneRun() throws Exception {
        var sample = sample("""
            [{"role": "user", "content": [{"type": "video", "video": "v.mp4", "use_audio_in_video": true},
                                          {"type": "text", "text": "What is said here?"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "A count to three."}]}]""");
        var sizes = List.<OmniTokens.Media>of(new OmniTokens.VideoGrid(4, 4, 4, 1.0, 400));
        checkEveryCut(AudioPreset.QWEN2_5_OMNI, sample, sizes);
        var seq = new OmniSequence(AudioPreset.QWEN2_5_OMNI, tokenizer);
        var full = seq.build(sample, sizes);
        var runs = runs(full.inputIds(), AudioPreset.QWEN2_5_OMNI);
        // a cut inside the interleaved chunks drops the video and its audio together: nothing of the run stays
        var t = seq.build(sample, sizes, (runs.getFirst()[0] + runs.getFirst()[1]) / 2);
        assertEquals(0, t.keptMedia());
        assertEquals(runs.getFirst()[0], t.length());
        assertTrue(Arrays.stream(t.inputIds()).noneMatch(id -> id == AudioPreset.QWEN2_5_OMNI.audioTokenId()));
    }

    @Test
    void everyFamilysClipsFollowTheRule() throws Exception {
        var sample = sample("""
            [{"role": "user", "content": [{"type": "audio", "audio": "a.wav"}, {"type": "audio", "audio": "b.wav"},
                                          {"type": "text", "text": "Same speaker?"}]},
             {"role": "assistant", "content": [{"type": "text", "text": "No."}]}]""");
        for (var preset : List.of(AudioPreset.QWEN2_AUDIO, AudioPreset.QWEN3_OMNI))
            checkEveryCut(preset, sample, List.of(new OmniTokens.AudioClip(300), new OmniTokens.AudioClip(120)));
    }
}
