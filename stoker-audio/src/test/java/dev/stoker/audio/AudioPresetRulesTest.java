package dev.stoker.audio;

import dev.stoker.core.AudioPreset;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** {@link AudioPreset}'s frame and token rules against what transformers 5.18.0 computed (committed fixture). */
@Timeout(60)
class AudioPresetRulesTest {
    @Test
    void maskFramesAreTheExtractorsForEveryPaddingRule() throws IOException {
        for (JsonNode m : Fixtures.meta().get("masks")) {
            long n = m.get("samples").asLong();
            long chunk = m.get("chunk_seconds").asLong() * 16_000;
            long padded = m.get("padding").asText().equals("longest") ? n : Math.max(n, chunk);
            // max_length with truncation (the default) cuts the clip to the chunk first
            long kept = m.get("padding").asText().equals("longest") ? n : Math.min(n, chunk);
            if (!m.get("padding").asText().equals("longest")) padded = chunk;
            String what = m.toString();
            assertEquals(m.get("frames").asInt(), AudioPreset.totalFrames(padded), what);
            assertEquals(m.get("mask_frames").asInt(), AudioPreset.maskFrames(kept, padded), what);
        }
    }

    @Test
    void eachFamilysMelFramesForAClipAlone() {
        assertEquals(19, AudioPreset.QWEN2_AUDIO.melFrames(3000));
        assertEquals(19, AudioPreset.QWEN2_5_OMNI.melFrames(3000));
        assertEquals(18, AudioPreset.QWEN3_OMNI.melFrames(3000));
        assertEquals(1000, AudioPreset.QWEN2_5_OMNI.melFrames(160_000));
        assertEquals(3000, AudioPreset.QWEN2_AUDIO.melFrames(10 * 480_000)); // truncated to 30 s
        assertEquals(30_000, AudioPreset.QWEN3_OMNI.melFrames(4_800_000));
        assertEquals(31_000, AudioPreset.QWEN3_OMNI.melFrames(4_960_000)); // never truncated
    }

    @Test
    void tokenCountsAreTheProcessorsForEveryFrameCount() throws IOException {
        JsonNode t = Fixtures.meta().get("tokens");
        JsonNode frames = t.get("mel_frames");
        for (AudioPreset f : AudioPreset.values()) {
            JsonNode expected = t.get(f.cliName());
            for (int i = 0; i < frames.size(); i++) {
                int l = frames.get(i).asInt();
                assertEquals(expected.get(i).asInt(), f.tokens(l), f + " L=" + l);
            }
        }
        // the cost the docs quote: 10 s is 250 tokens under Qwen2-Audio/2.5-Omni, 130 under Qwen3-Omni
        assertEquals(250, AudioPreset.QWEN2_5_OMNI.tokensForSamples(160_000));
        assertEquals(130, AudioPreset.QWEN3_OMNI.tokensForSamples(160_000));
    }

    @Test
    void processorNamesAndPaddingAgreeWithTheRules() {
        assertEquals(AudioPreset.QWEN2_5_OMNI, AudioPreset.fromName("qwen2.5-omni"));
        var e = org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class, () -> AudioPreset.fromName("qwen2-vl"));
        assertEquals("unknown audio processor 'qwen2-vl'; expected one of qwen2-audio, qwen2.5-omni, qwen3-omni", e.getMessage());
        // the preset's padding (what --audio-pad hf reproduces) is the frame rules' padding: one type says both
        for (AudioPreset f : AudioPreset.values()) {
            long tenSeconds = 160_000;
            long padded = f.paddedSamples(tenSeconds);
            assertEquals(f.hfPadSeconds() == 0 ? tenSeconds : f.hfPadSeconds() * 16_000L, padded, f.toString());
            assertEquals(f.hfPadSeconds() == 0 ? Long.MAX_VALUE : padded / AudioPreset.HOP_LENGTH, f.maxMelFrames(), f.toString());
        }
    }
}
