package dev.stoker.audio;

import dev.stoker.core.AudioFamily;
import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** {@link AudioFamily}'s frame and token rules against what transformers 5.18.0 computed (committed fixture). */
@Timeout(60)
class AudioFamilyTest {
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
            assertEquals(m.get("frames").asInt(), AudioFamily.totalFrames(padded), what);
            assertEquals(m.get("mask_frames").asInt(), AudioFamily.maskFrames(kept, padded), what);
        }
    }

    @Test
    void eachFamilysMelFramesForAClipAlone() {
        assertEquals(19, AudioFamily.QWEN2_AUDIO.melFrames(3000));
        assertEquals(19, AudioFamily.QWEN2_5_OMNI.melFrames(3000));
        assertEquals(18, AudioFamily.QWEN3_OMNI.melFrames(3000));
        assertEquals(1000, AudioFamily.QWEN2_5_OMNI.melFrames(160_000));
        assertEquals(3000, AudioFamily.QWEN2_AUDIO.melFrames(10 * 480_000)); // truncated to 30 s
        assertEquals(30_000, AudioFamily.QWEN3_OMNI.melFrames(4_800_000));
        assertEquals(31_000, AudioFamily.QWEN3_OMNI.melFrames(4_960_000)); // never truncated
    }

    @Test
    void tokenCountsAreTheProcessorsForEveryFrameCount() throws IOException {
        JsonNode t = Fixtures.meta().get("tokens");
        JsonNode frames = t.get("mel_frames");
        for (AudioFamily f : AudioFamily.values()) {
            JsonNode expected = t.get(f.processorName);
            for (int i = 0; i < frames.size(); i++) {
                int l = frames.get(i).asInt();
                assertEquals(expected.get(i).asInt(), f.tokens(l), f + " L=" + l);
            }
        }
        // the cost the docs quote: 10 s is 250 tokens under Qwen2-Audio/2.5-Omni, 130 under Qwen3-Omni
        assertEquals(250, AudioFamily.QWEN2_5_OMNI.tokensForSamples(160_000));
        assertEquals(130, AudioFamily.QWEN3_OMNI.tokensForSamples(160_000));
    }

    @Test
    void processorNames() {
        assertEquals(AudioFamily.QWEN2_5_OMNI, AudioFamily.byProcessorName("qwen2.5-omni"));
        assertEquals(null, AudioFamily.byProcessorName("qwen2-vl"));
    }
}
