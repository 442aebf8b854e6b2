package dev.stoker.encode.audio;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.stoker.core.AudioPreset;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodeOptions;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.SharedTokenizer;
import dev.stoker.testkit.FfmpegClips;
import dev.stoker.text.ChatSample;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link OmniEncoder} on clips the ffmpeg command makes: the encoded {@code input_ids} hold exactly the family's token
 * rule of each clip's mask sum as audio pads; Qwen3-Omni's clips are padded to the sample's longest (a shorter clip keeps
 * {@code ceil(n/160)} frames, alone {@code floor(n/160)}); the length measured from headers equals the encoded one where
 * the header's duration is exact (WAV, FLAC); the per-item window {@code audio_start}/{@code audio_end}.
 */
@Timeout(120)
@ExtendWith(SharedTokenizer.class)
class OmniEncoderTest {
    @TempDir Path tmp;
    private final Map<String, byte[]> files = new HashMap<>();

    @BeforeEach
    void clips() throws Exception {
        FfmpegClips.require();
        // 1.00006 s at 16 kHz: 16,001 samples, one past a frame edge (ceil and floor of n/160 differ)
        make("a.wav", "sine=frequency=440:sample_rate=16000:duration=1.0000625", "-ac", "1", "-c:a", "pcm_s16le");
        make("b.wav", "sine=frequency=220:sample_rate=16000:duration=2.5", "-ac", "1", "-c:a", "pcm_s16le");
        make("c.flac", "sine=frequency=300:sample_rate=16000:duration=1.5", "-ac", "1", "-c:a", "flac");
    }

    private void make(String name, String source, String... codec) throws Exception {
        var args = new java.util.ArrayList<>(java.util.List.of("-f", "lavfi", "-i", source));
        args.addAll(java.util.List.of(codec));
        files.put(name, Files.readAllBytes(FfmpegClips.make(tmp.resolve(name), args.toArray(String[]::new))));
    }

    private static SampleEncoder encoder(AudioPreset family, AudioEncoding.Pad pad) {
        var options = EncodeOptions.defaults(ProcessorPreset.QWEN2_5_VL).withAudio(new AudioEncoding(family, pad));
        return new SampleEncoder(options, SharedTokenizer.get());
    }

    private ChatSample sample(SampleEncoder e, String json) {
        return e.parse(json.getBytes(StandardCharsets.UTF_8), "s");
    }

    private SampleEncoder.ImageSource source() {
        return (id, ref) -> {
            byte[] b = files.get(ref);
            if (b == null) throw new SampleException(id, SampleException.Stage.FETCH, "no " + ref);
            return b;
        };
    }

    private static long count(long[] ids, long id) { return java.util.Arrays.stream(ids).filter(x -> x == id).count(); }

    @Test
    void audioPadsAreTheFamilysRuleOfEachClipsMaskSum() {
        String json = """
            {"messages": [{"role": "user", "content": "<audio><audio>Which is longer?"}, {"role": "assistant", "content": "The second."}],
             "audios": ["a.wav", "b.wav"]}""";
        for (var family : AudioPreset.values()) {
            var e = encoder(family, AudioEncoding.Pad.VALID);
            var s = sample(e, json);
            var out = e.encodeAudioSample(s, source(), null);
            assertEquals(2, out.clips());
            int pads = 0;
            for (int k = 0; k < 2; k++) {
                int sum = 0;
                for (int j = 0; j < out.frames(); j++) sum += out.featureMask()[k * out.frames() + j];
                assertEquals(out.validFrames()[k], sum, family + " clip " + k);
                pads += family.tokens(sum);
            }
            assertEquals(pads, count(out.sample().inputIds(), family.audioTokenId()), family.toString());
            // 16,001 samples: 101 frames beside a longer clip (zero-padded, as every family pads this one), 100 alone under Qwen3-Omni
            assertEquals(101, out.validFrames()[0], family.toString());
            assertEquals(250, out.validFrames()[1], family.toString());
            assertEquals(250, out.frames(), "valid mode: the longest clip's frames");
            // the header-measured length is the encoded one for PCM clips
            var bytes = new HashMap<>(files);
            assertEquals(out.sample().inputIds().length, e.shape(s, bytes).tokens(), family + ": validate's count");
        }
        var alone = encoder(AudioPreset.QWEN3_OMNI, AudioEncoding.Pad.VALID);
        var one = alone.encodeAudioSample(sample(alone, """
            {"messages": [{"role": "user", "content": "<audio>Say?"}, {"role": "assistant", "content": "A tone."}], "audios": ["a.wav"]}"""),
                source(), null);
        assertEquals(100, one.validFrames()[0], "Qwen3-Omni pads a clip alone to itself: floor(16001/160)");
    }

    @Test
    void hfPaddingKeepsTheValidFramesAndTheTokens() {
        String json = """
            {"messages": [{"role": "user", "content": "<audio>Say?"}, {"role": "assistant", "content": "A tone."}], "audios": ["c.flac"]}""";
        var valid = encoder(AudioPreset.QWEN2_AUDIO, AudioEncoding.Pad.VALID);
        var hf = encoder(AudioPreset.QWEN2_AUDIO, AudioEncoding.Pad.HF);
        var v = valid.encodeAudioSample(sample(valid, json), source(), null);
        var h = hf.encodeAudioSample(sample(hf, json), source(), null);
        assertEquals(150, v.frames());
        assertEquals(3000, h.frames(), "Qwen2-Audio pads to 30 s");
        assertEquals(150, h.validFrames()[0]);
        assertArrayEquals(v.sample().inputIds(), h.sample().inputIds());
        for (int m = 0; m < AudioPreset.MEL_BINS; m++)
            for (int j = 0; j < 150; j++)
                assertEquals(v.inputFeatures()[m * 150 + j], h.inputFeatures()[m * 3000 + j], "mel " + m + " frame " + j);
        assertEquals(1, v.positionRows(), "Qwen2-Audio: 1-D positions");
        var bytes = new HashMap<>(files);
        assertEquals(v.sample().inputIds().length, valid.shape(sample(valid, json), bytes).tokens(), "FLAC's header duration is exact");
    }

    @Test
    void theWindowKeysCutTheClipAndBadOnesAreTheSamplesError() {
        var e = encoder(AudioPreset.QWEN2_5_OMNI, AudioEncoding.Pad.VALID);
        var s = sample(e, """
            {"messages": [{"role": "user", "content": [{"type": "audio", "audio": "b.wav", "audio_start": 0.5, "audio_end": 2.0},
                                                      {"type": "text", "text": "Say?"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "A tone."}]}]}""");
        var out = e.encodeAudioSample(s, source(), null);
        assertEquals(150, out.validFrames()[0], "1.5 s of the clip");
        assertEquals(out.sample().inputIds().length, e.shape(s, new HashMap<>(files)).tokens(), "validate counts the window too");
        var bad = sample(e, """
            {"messages": [{"role": "user", "content": [{"type": "audio", "audio": "b.wav", "speed": 2},
                                                      {"type": "text", "text": "Say?"}]},
                          {"role": "assistant", "content": [{"type": "text", "text": "A tone."}]}]}""");
        var x = assertThrows(SampleException.class, () -> e.encodeAudioSample(bad, source(), null));
        assertTrue(x.getMessage().contains("per-item key 'speed' is not read"), x.getMessage());
        var image = sample(e, """
            {"messages": [{"role": "user", "content": "<image><audio>Say?"}, {"role": "assistant", "content": "A tone."}],
             "images": ["i.jpg"], "audios": ["b.wav"]}""");
        var q2 = encoder(AudioPreset.QWEN2_AUDIO, AudioEncoding.Pad.VALID); // no vision tower (Qwen3-Omni's images: Qwen3OmniVisionCliTest)
        var y = assertThrows(SampleException.class, () -> q2.encodeAudioSample(sample(q2, """
            {"messages": [{"role": "user", "content": "<image><audio>Say?"}, {"role": "assistant", "content": "A tone."}],
             "images": ["i.jpg"], "audios": ["b.wav"]}"""), source(), null));
        assertTrue(y.getMessage().contains("qwen2-audio takes audio and text only"), y.getMessage());
        assertEquals(1, image.imagePaths().size());
    }
}
