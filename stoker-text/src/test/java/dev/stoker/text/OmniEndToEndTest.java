package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.AudioPreset;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Records to ids and positions through {@link OmniSequence}, against the real processors end to end (the fixture's
 * {@code end_to_end} cases: transformers 5.18.0 {@code Qwen2_5OmniProcessor} / {@code Qwen3OmniMoeProcessor} with their
 * feature extractor, image and video processors on silent clips and black frames, {@code use_audio_in_video} on, then the
 * thinker's {@code get_rope_index}; and {@code Qwen2AudioProcessor} on two audio chats, 1-D positions). Stoker's side takes from the fixture only what its media stages would measure (each
 * clip's sample count, each grid) and derives the rest: valid mel frames ({@link OmniTokens#melFrames(AudioPreset, long, long)},
 * which for Qwen3-Omni depend on the call's longest clip: the case of a 3 s clip beside a 4 s video track found that), seconds per grid
 * from the fps the caller passed or the family's default ({@link AudioPreset#defaultVideoFps}: Qwen3-Omni's 1.0).
 */
@Timeout(60)
class OmniEndToEndTest {
    private static JsonNode fixture;
    private static QwenTokenizer tokenizer;
    private static final SampleParser PARSER = new SampleParser(SampleParser.Videos.ACCEPT, null, SampleParser.Audios.ACCEPT);
    private static final ObjectMapper JSON = new ObjectMapper();

    @BeforeAll
    static void load() throws IOException {
        try (var in = OmniEndToEndTest.class.getResourceAsStream("omni/omni-fixtures.json")) {
            fixture = JSON.readTree(in);
        }
        tokenizer = QwenTokenizer.bundled();
    }

    @AfterAll
    static void close() { tokenizer.close(); }

    @Test
    void recordsGiveTheProcessorsIdsAndTheModelsPositions() {
        int n = 0;
        for (var c : fixture.get("end_to_end")) {
            var preset = AudioPreset.fromName(c.get("family").asText());
            var name = preset + " " + c.get("name").asText();
            var sample = PARSER.parse(JSON.createObjectNode().set("messages", c.get("messages")), name);
            double fps = c.get("fps").isNull() ? preset.defaultVideoFps() : c.get("fps").asDouble();
            var clips = c.get("clip_samples");
            long longest = 0;
            for (var k : clips) longest = Math.max(longest, k.asLong());
            var sizes = new ArrayList<OmniTokens.Media>();
            var frames = new ArrayList<Long>();
            int clip = 0, image = 0, video = 0;
            for (var part : sample.media()) {
                switch (part) {
                    case Message.Audio _ -> {
                        long f = OmniTokens.melFrames(preset, clips.get(clip++).asLong(), longest);
                        frames.add(f);
                        sizes.add(new OmniTokens.AudioClip(f));
                    }
                    case Message.Image _ -> {
                        var g = c.get("image_grid_thw").get(image++);
                        sizes.add(new OmniTokens.ImageGrid(g.get(0).asLong(), g.get(1).asLong(), g.get(2).asLong()));
                    }
                    case Message.Video v -> {
                        var g = c.get("video_grid_thw").get(video);
                        long f = v.useAudioInVideo() ? OmniTokens.melFrames(preset, clips.get(clip++).asLong(), longest) : 0;
                        if (f > 0) frames.add(f);
                        double spg = 2 / fps;
                        assertEquals(c.get("video_second_per_grid").get(video++).asDouble(), spg, 1e-7, name + ": seconds per grid");
                        sizes.add(new OmniTokens.VideoGrid(g.get(0).asLong(), g.get(1).asLong(), g.get(2).asLong(), spg, f));
                    }
                    case Message.Text _ -> throw new AssertionError("media() holds no text");
                }
            }
            assertEquals(c.get("mel_frames").toString(), JSON.valueToTree(frames).toString(), name + ": valid mel frames");
            var f = new OmniSequence(preset, tokenizer).build(sample, sizes);
            assertArrayEquals(OmniFixturesTest.longs(c.get("input_ids")), f.inputIds(), name + ": input_ids");
            int len = f.length();
            for (int r = 0; r < 3 && preset != AudioPreset.QWEN2_AUDIO; r++) {
                if (preset == AudioPreset.QWEN3_OMNI) {
                    var want = c.get("positions_f32_bits").get(r);
                    for (int i = 0; i < len; i++)
                        assertEquals(want.get(i).asInt(), Float.floatToRawIntBits(f.floatPositions()[r * len + i]), name + ": position " + r + "," + i);
                } else {
                    assertArrayEquals(OmniFixturesTest.longs(c.get("positions").get(r)), java.util.Arrays.copyOfRange(f.positions(), r * len, (r + 1) * len),
                            name + ": position row " + r);
                }
            }
            n++;
        }
        assertEquals(8, n);
    }
}
