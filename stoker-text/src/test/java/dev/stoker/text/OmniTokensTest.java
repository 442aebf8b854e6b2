package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.AudioPreset;
import dev.stoker.text.OmniTokens.AudioClip;
import dev.stoker.text.OmniTokens.ImageGrid;
import dev.stoker.text.OmniTokens.VideoGrid;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The expansion's refusals, and Qwen2-Audio (audio only, 1-D positions), which the transformers fixtures do not hold. */
@Timeout(60)
class OmniTokensTest {
    private static final AudioPreset A = AudioPreset.QWEN2_AUDIO, O = AudioPreset.QWEN2_5_OMNI, Q = AudioPreset.QWEN3_OMNI;

    @Test
    void qwen2AudioWidensEachAudioPadAndNumbersPositionsInOneDimension() {
        long[] ids = {151644, 5, 151647, 151646, 151648, 7, 151647, 151646, 151648, 151645};
        var media = List.<OmniTokens.Media>of(new AudioClip(1000), new AudioClip(3));
        long[] out = OmniTokens.expand(ids, A, media);
        assertEquals(10 - 2 + 250 + 1, out.length, "1000 frames give 250 tokens, 3 frames 1 (Qwen2AudioProcessor's formula)");
        assertEquals(250, java.util.Arrays.stream(out, 3, 253).filter(x -> x == 151646).count());
        var pos = OmniPositions.integer(out, A, media);
        for (int r = 0; r < 3; r++) for (int i = 0; i < out.length; i++) assertEquals(i, pos[r][i]);
    }

    @Test
    void refusals() {
        long[] oneAudio = {1, 151647, 151646, 151648, 2};
        assertEquals("media item 1: a clip of 2 mel frame(s) gives no qwen2.5-omni audio token (at least 3 frames)",
                assertThrows(IllegalArgumentException.class, () -> OmniTokens.expand(oneAudio, O, List.of(new AudioClip(2)))).getMessage());
        assertEquals("the text has 1 media pad(s) but 2 media item(s) were given", assertThrows(IllegalArgumentException.class,
                () -> OmniTokens.expand(oneAudio, O, List.of(new AudioClip(300), new AudioClip(300)))).getMessage());
        assertEquals("media item 1 is ImageGrid[t=1, h=2, w=2] but the text has an audio pad there (qwen3-omni)", assertThrows(IllegalArgumentException.class,
                () -> OmniTokens.expand(new long[] {151669, 151675, 151670}, Q, List.of(new ImageGrid(1, 2, 2)))).getMessage());
        assertEquals("qwen2-audio takes audio only, not ImageGrid[t=1, h=2, w=2]", assertThrows(IllegalArgumentException.class,
                () -> OmniTokens.expand(oneAudio, A, List.of(new ImageGrid(1, 2, 2)))).getMessage());
        long[] twoVideos = {151652, 151656, 151653, 151652, 151656, 151653};
        assertEquals("video 2 does not use its audio but video 1 does; use_audio_in_video is one value per sample",
                assertThrows(IllegalArgumentException.class, () -> OmniTokens.expand(twoVideos, O,
                        List.of(new VideoGrid(2, 2, 2, 1.0, 400), new VideoGrid(2, 2, 2, 1.0, 0)))).getMessage());
        assertEquals("video 1: its pad is not wrapped as <|vision_bos|><|VIDEO|><|vision_eos|>, which the processor needs to interleave the video's audio",
                assertThrows(IllegalArgumentException.class, () -> OmniTokens.expand(new long[] {151656}, O,
                        List.of(new VideoGrid(2, 2, 2, 1.0, 400)))).getMessage());
        assertThrows(IllegalArgumentException.class, () -> new ImageGrid(1, 3, 2), "odd h cannot merge 2x2");
        assertThrows(IllegalArgumentException.class, () -> new VideoGrid(1, 2, 2, 0.0, 0), "zero seconds per grid");
        assertThrows(IllegalArgumentException.class, () -> OmniPositions.float32(oneAudio, O, List.of(new AudioClip(300))));
        assertThrows(IllegalArgumentException.class, () -> OmniPositions.integer(oneAudio, Q, List.of(new AudioClip(300))));
    }

    @Test
    void presetsByNameAndModelType() {
        assertEquals(O, AudioPreset.fromName("qwen2.5-omni"));
        assertEquals(Q, AudioPreset.ofModelType("qwen3_omni_moe"));
        assertEquals(A, AudioPreset.ofModelType("qwen2_audio"));
        assertEquals(null, AudioPreset.ofModelType("qwen2_5_vl"));
        assertEquals("unknown audio processor 'qwen2-vl'; expected one of qwen2-audio, qwen2.5-omni, qwen3-omni",
                assertThrows(IllegalArgumentException.class, () -> AudioPreset.fromName("qwen2-vl")).getMessage());
        assertThrows(IllegalStateException.class, A::imageTokenId);
        assertArrayEquals(new long[] {30 * 100, 300 * 100, Long.MAX_VALUE},
                new long[] {A.maxMelFrames(), O.maxMelFrames(), Q.maxMelFrames()});
    }
}
