package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.SampleException;
import dev.stoker.text.OmniTokens.AudioClip;
import dev.stoker.text.OmniTokens.Media;
import dev.stoker.text.OmniTokens.VideoGrid;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A LLaMA-Factory record to token-side inputs through {@link OmniSequence}: the parts it joins (template, tokenization,
 * expansion, labels, positions) are each held against transformers by {@link OmniTemplateTest} and {@link OmniFixturesTest};
 * this holds the joining and the per-sample errors.
 */
@Timeout(60)
class OmniSequenceTest {
    private static QwenTokenizer tokenizer;
    private static final SampleParser PARSER = new SampleParser(SampleParser.Videos.ACCEPT, null, SampleParser.Audios.ACCEPT);

    @BeforeAll
    static void load() { tokenizer = QwenTokenizer.bundled(); }

    @AfterAll
    static void close() { tokenizer.close(); }

    private static ChatSample parse(String json) {
        return PARSER.parseLine(json.getBytes(StandardCharsets.UTF_8), "demo.json[0]");
    }

    @Test
    void llamaFactoryVideoAudioDemoUnderEachOmniFamily() {
        var sample = parse("""
            {"messages": [{"content": "<video><audio>What is the video describing?", "role": "user"},
                          {"content": "A girl who is drawing a picture of a guitar and feel nervous.", "role": "assistant"}],
             "videos": ["mllm_demo_data/4.mp4"], "audios": ["mllm_demo_data/4.mp3"]}""");
        List<Media> sizes = List.of(new VideoGrid(4, 4, 6, 1.0, 0), new AudioClip(1000));
        for (var preset : List.of(AudioPreset.QWEN2_5_OMNI, AudioPreset.QWEN3_OMNI)) {
            var f = new OmniSequence(preset, tokenizer).build(sample, sizes);
            var t = new OmniTemplate(preset);
            long[] ids = OmniTokens.expand(t.tokenize(t.render(sample.messages()), tokenizer), preset, sizes);
            assertArrayEquals(ids, f.inputIds(), preset.toString());
            assertEquals(4 * 4 * 6 / 4, Arrays.stream(ids).filter(x -> x == preset.videoTokenId()).count());
            assertEquals(OmniTokens.audioTokens(preset, 1000), Arrays.stream(ids).filter(x -> x == preset.audioTokenId()).count());
            var answer = tokenizer.encode("A girl who is drawing a picture of a guitar and feel nervous.");
            long learned = Arrays.stream(f.labels()).filter(x -> x != QwenTokenIds.IGNORE_INDEX).count();
            assertEquals(answer.length + 2, learned, "the answer, <|im_end|> and the newline are learned; nothing else");
            if (preset == AudioPreset.QWEN3_OMNI) {
                assertNull(f.positions());
                assertEquals(3 * ids.length, f.floatPositions().length);
            } else {
                assertNull(f.floatPositions());
                var p = OmniPositions.integer(ids, preset, sizes);
                assertArrayEquals(p[1], Arrays.copyOfRange(f.positions(), ids.length, 2 * ids.length), "row h, row-major");
            }
        }
    }

    @Test
    void sizesMustMatchTheSampleMedia() {
        var sample = parse("""
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "v.mp4", "use_audio_in_video": true},
                                                       {"type": "text", "text": "What is said?"}]},
                          {"role": "assistant", "content": "Hello."}]}""");
        var seq = new OmniSequence(AudioPreset.QWEN2_5_OMNI, tokenizer);
        var e = assertThrows(SampleException.class, () -> seq.build(sample, List.of(new VideoGrid(2, 2, 2, 1.0, 0))));
        assertEquals("demo.json[0]", e.sampleId());
        assertEquals(SampleException.Stage.TEXT, e.stage());
        assertEquals("qwen2.5-omni: media item 1 is video v.mp4 with its audio but its size is VideoGrid[t=2, h=2, w=2, secondPerGrid=1.0, audioMelFrames=0]",
                e.getMessage().substring(e.getMessage().indexOf("qwen2.5-omni")));
        var f = seq.build(sample, List.of(new VideoGrid(2, 2, 2, 1.0, 400)));
        assertEquals(2 + OmniTokens.audioTokens(AudioPreset.QWEN2_5_OMNI, 400),
                Arrays.stream(f.inputIds()).filter(x -> x == 151656 || x == 151646).count(), "2 video and 100 audio tokens interleaved");
        assertThrows(SampleException.class, () -> new OmniSequence(AudioPreset.QWEN2_AUDIO, tokenizer).build(sample, List.of(new VideoGrid(2, 2, 2, 1.0, 400))));
    }
}
