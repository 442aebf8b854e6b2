package dev.stoker.audio;

import dev.stoker.core.AudioPreset;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.stoker.core.Npy;
import dev.stoker.video.ffmpeg.AudioReader;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * The Java side of tools/audio-check (run by its check.py, not by the tests): for each clip of a manifest, Stoker's
 * decode (soxr and swr) and Stoker's features of both Stoker's PCM and the reference's PCM, as .npy beside the
 * reference's.
 *
 * <pre>manifest.json: [{"name": "...", "path": "clip.mp3", "ref_pcm": "name.ref_pcm.npy"}, ...]</pre>
 */
public final class AudioCheckMain {
    private AudioCheckMain() {}

    public static void main(String[] args) throws Exception {
        Path manifest = Path.of(args[0]);
        Path out = manifest.getParent();
        var lm = new WhisperLogMel();
        for (JsonNode c : new ObjectMapper().readTree(manifest.toFile())) {
            String name = c.get("name").asText();
            for (var r : AudioReader.Resampler.values()) {
                var clip = AudioDecoder.decode(Path.of(c.get("path").asText()),
                        AudioDecoder.Options.whole().resampler(r), System.nanoTime() + 60_000_000_000L);
                String tag = r.name().toLowerCase(java.util.Locale.ROOT);
                Npy.writeFloat32(out.resolve(name + ".java_pcm_" + tag + ".npy"), clip.samples(), clip.samples().length);
                for (AudioPreset f : new AudioPreset[] {AudioPreset.QWEN2_AUDIO, AudioPreset.QWEN3_OMNI}) {
                    var feat = lm.valid(clip.samples(), f);
                    Npy.writeFloat32(out.resolve(name + ".java_feat_" + tag + "_" + f.cliName() + ".npy"),
                            feat.values(), 128, feat.frames());
                }
            }
            if (c.has("offset")) { // librosa.load(offset=, duration=) against Options.window
                var clip = AudioDecoder.decode(Path.of(c.get("path").asText()), AudioDecoder.Options.whole()
                        .window(c.get("offset").asDouble(), c.get("duration").asDouble()), System.nanoTime() + 60_000_000_000L);
                Npy.writeFloat32(out.resolve(name + ".java_pcm_window.npy"), clip.samples(), clip.samples().length);
            }
            float[] ref = Npy.read(out.resolve(c.get("ref_pcm").asText())).asFloats();
            for (AudioPreset f : new AudioPreset[] {AudioPreset.QWEN2_AUDIO, AudioPreset.QWEN3_OMNI}) {
                var feat = lm.valid(ref, f);
                Npy.writeFloat32(out.resolve(name + ".java_feat_refpcm_" + f.cliName() + ".npy"),
                        feat.values(), 128, feat.frames());
            }
        }
        Files.writeString(out.resolve("java.done"), "ok\n");
    }
}
