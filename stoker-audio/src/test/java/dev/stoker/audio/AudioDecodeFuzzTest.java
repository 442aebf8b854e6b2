package dev.stoker.audio;

import dev.stoker.core.AudioPreset;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.code_intelligence.jazzer.junit.FuzzTest;
import dev.stoker.core.SampleException;
import java.io.IOException;
import java.io.UncheckedIOException;
import org.junit.jupiter.api.Timeout;

/**
 * Fuzzes the audio path: the bytes as an audio file through {@link AudioDecoder} (libavformat through the custom
 * AVIOContext's upcalls, libavcodec, libswresample) with a length bound and a deadline, then the clip through
 * {@link WhisperLogMel}.
 *
 * <p>The contract on every input: a clip of 1..bound finite samples whose features are finite, or a
 * {@link SampleException} at stage DECODE naming the clip, its message beginning "audio NAME: "; never another
 * exception, never a hang (the class's {@code @Timeout}). The libraries are native: a crash in them ends the JVM,
 * which a fuzz run reports as a finding too. Every 100 inputs a good clip still decodes. Seeds: a WAV, an MP3 and
 * an M4A of a fraction of a second (AudioDecodeFuzzTestInputs/decode).
 */
@Timeout(10)
class AudioDecodeFuzzTest {
    private static final String NAME = "fuzzed-audio";
    private static final AudioDecoder.Options OPTIONS = AudioDecoder.Options.whole().maxSeconds(30);
    private static long inputs;

    @FuzzTest(maxDuration = "10s")
    void decode(byte[] data) {
        try {
            var clip = AudioDecoder.decode(NAME, data, OPTIONS, System.nanoTime() + 5_000_000_000L);
            assertTrue(clip.samples().length >= 1 && clip.samples().length <= OPTIONS.maxSamples());
            for (float v : clip.samples()) assertTrue(Float.isFinite(v), "a non-finite sample");
            if (clip.samples().length >= AudioPreset.HOP_LENGTH) {
                var f = new WhisperLogMel().valid(clip.samples(), AudioPreset.QWEN3_OMNI);
                for (float v : f.values()) assertTrue(Float.isFinite(v), "a non-finite feature");
            }
        } catch (SampleException refused) {
            assertEquals(SampleException.Stage.DECODE, refused.stage(), refused.getMessage());
            assertEquals(NAME, refused.sampleId(), refused.getMessage());
            assertTrue(refused.getMessage().startsWith("audio " + NAME + ": "), refused.getMessage());
        }
        if (++inputs % 100 == 0) goodClipStillDecodes();
    }

    private static void goodClipStillDecodes() {
        try (var in = AudioDecodeFuzzTest.class.getResourceAsStream("AudioDecodeFuzzTestInputs/decode/tone.m4a")) {
            var clip = AudioDecoder.decode("good.m4a", in.readAllBytes(), OPTIONS, System.nanoTime() + 5_000_000_000L);
            // 0.2 s of AAC at 16 kHz: four whole 1,024-sample frames after the priming, as the ffmpeg command
            // (and so librosa's audioread path) decodes it too; the container keeps no end trim
            assertEquals(4096, clip.samples().length);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
