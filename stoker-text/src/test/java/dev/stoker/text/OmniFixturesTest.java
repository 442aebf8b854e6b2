package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.AudioPreset;
import dev.stoker.text.OmniTokens.AudioClip;
import dev.stoker.text.OmniTokens.ImageGrid;
import dev.stoker.text.OmniTokens.Media;
import dev.stoker.text.OmniTokens.VideoGrid;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Audio token counts, valid mel frames, placeholder expansion and M-RoPE positions of the audio families against what the
 * real transformers code made ({@code omni/omni-fixtures.json}, written by {@code tools/hf-check/audio_text_check.py} with
 * transformers 5.18.0: its WhisperFeatureExtractor, the processors' {@code replace_multimodal_special_tokens} and the
 * thinkers' {@code get_rope_index}): ids and integer positions equal, Qwen3-Omni's float32 positions bit for bit.
 */
@Timeout(60)
class OmniFixturesTest {
    private static JsonNode fixture;

    @BeforeAll
    static void load() throws IOException {
        try (var in = OmniFixturesTest.class.getResourceAsStream("omni/omni-fixtures.json")) {
            fixture = new ObjectMapper().readTree(in);
        }
        assertEquals("5.18.0", fixture.get("transformers").asText());
    }

    @Test
    void audioTokenCountsAreTheProcessorsFormulas() {
        int n = 0;
        for (var t : fixture.get("tokens")) {
            long frames = t.get("frames").asLong();
            assertEquals(t.get("stride4").asLong(), dev.stoker.core.AudioPreset.qwen2AudioTokens(Math.toIntExact(frames)), "stride-4 tokens of " + frames + " frames");
            assertEquals(t.get("qwen3").asLong(), dev.stoker.core.AudioPreset.qwen3OmniTokens(Math.toIntExact(frames)), "Qwen3-Omni tokens of " + frames + " frames");
            n++;
        }
        assertTrue(n >= 20, "fixture rows: " + n);
    }

    @Test
    void validMelFramesAsTheFeatureExtractorMasksThem() {
        for (var row : fixture.get("mel_frames")) {
            long samples = row.get("samples").asLong();
            for (var preset : AudioPreset.values()) {
                long want = row.get(preset.cliName()).asLong();
                if (want < 0) assertThrows(IllegalArgumentException.class, () -> OmniTokens.melFrames(preset, samples), preset + " " + samples);
                else assertEquals(want, OmniTokens.melFrames(preset, samples), preset + ": frames of " + samples + " samples");
            }
        }
    }

    @Test
    void expansionAndPositionsEqualTransformers() {
        int cases = 0;
        for (var c : fixture.get("cases")) {
            var preset = AudioPreset.fromName(c.get("family").asText());
            var name = preset + " " + c.get("name").asText();
            var media = media(c.get("media"));
            long[] expanded = OmniTokens.expand(longs(c.get("before")), preset, media);
            assertArrayEquals(longs(c.get("expanded")), expanded, name + ": ids");
            if (preset == AudioPreset.QWEN3_OMNI) {
                var pos = OmniPositions.float32(expanded, preset, media);
                var want = c.get("positions_f32_bits");
                for (int r = 0; r < 3; r++) {
                    var bits = new int[pos[r].length];
                    for (int i = 0; i < bits.length; i++) bits[i] = Float.floatToRawIntBits(pos[r][i]);
                    var wantBits = new int[want.get(r).size()];
                    for (int i = 0; i < wantBits.length; i++) wantBits[i] = want.get(r).get(i).asInt();
                    assertArrayEquals(wantBits, bits, name + ": position row " + r);
                }
            } else {
                var pos = OmniPositions.integer(expanded, preset, media);
                for (int r = 0; r < 3; r++) assertArrayEquals(longs(c.get("positions").get(r)), pos[r], name + ": position row " + r);
            }
            cases++;
        }
        assertEquals(24, cases);
    }

    /** The fixture's cases exercise what makes the rules differ: fractional Qwen3 positions, chunk jumps, short and long audio. */
    @Test
    void theFixtureCoversTheHardCases() {
        boolean fractional = false;
        for (var c : fixture.get("cases")) {
            if (!c.has("positions_f32_bits")) continue;
            for (var row : c.get("positions_f32_bits"))
                for (var bits : row) {
                    float v = Float.intBitsToFloat(bits.asInt());
                    fractional |= v != Math.rint(v);
                }
        }
        assertTrue(fractional, "some Qwen3-Omni position is fractional (fps 1.5)");
    }

    static List<Media> media(JsonNode list) {
        var out = new ArrayList<Media>();
        for (var m : list) {
            switch (m.get(0).asText()) {
                case "audio" -> out.add(new AudioClip(m.get(1).asLong()));
                case "image" -> out.add(new ImageGrid(m.get(1).asLong(), m.get(2).asLong(), m.get(3).asLong()));
                case "video" -> out.add(new VideoGrid(m.get(1).asLong(), m.get(2).asLong(), m.get(3).asLong(),
                        2 / m.get(4).asDouble(), Math.max(0, m.get(5).asLong())));
                default -> throw new IllegalArgumentException("unknown media " + m);
            }
        }
        return out;
    }

    static long[] longs(JsonNode array) {
        var out = new long[array.size()];
        for (int i = 0; i < out.length; i++) out[i] = array.get(i).asLong();
        return out;
    }
}
