package dev.stoker.bench;

import dev.stoker.core.AudioPreset;
import dev.stoker.audio.AudioDecoder;
import dev.stoker.audio.WhisperLogMel;
import dev.stoker.video.ffmpeg.AudioReader;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * Single-thread cost of the audio path (issue 32's numbers to beat: decode + resample at ≥ 300× real time per core,
 * log-mel of a 10 s clip in ≤ 10 ms per core, ../shared/docs/audio.md §5):
 * <ul>
 *   <li>{@code decodeResample}: {@link AudioDecoder} on 300 s of AAC stereo at 48 kHz in an M4A (made once by the
 *       ffmpeg command in the trial's setup), to 16 kHz mono, with each resampler; real-time factor = 300 s / time;</li>
 *   <li>{@code logMel10s}: {@link WhisperLogMel} on a 10 s clip at 16 kHz, the valid frames (what Stoker serves:
 *       1,000 frames, 512,000 bytes) against {@code hfPadded} under Qwen2.5-Omni (the processor's 300 s: 30,000
 *       frames, 15,360,000 bytes). The bytes are printed by the setup.</li>
 * </ul>
 *
 * <p>Run: {@code ./stoker jmh AudioBenchmark} (needs the ffmpeg command for the setup's clip).
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 2, time = 2)
@Measurement(iterations = 5, time = 2)
@Fork(value = 1, jvmArgsAppend = {"--enable-native-access=ALL-UNNAMED"})
public class AudioBenchmark {
    /** Seconds of audio in the decode benchmark's clip. */
    public static final int DECODE_SECONDS = 300;

    @Param({"SOXR_HQ", "SWR"})
    public String resampler;

    @Param({"valid", "hfPadded"})
    public String features;

    private Path dir;
    private Path m4a;
    private float[] tenSeconds;
    private WhisperLogMel logMel;
    private AudioDecoder.Options options;

    @Setup(Level.Trial)
    public void setUp() throws IOException, InterruptedException {
        dir = Files.createTempDirectory("stoker-audio-bench");
        m4a = dir.resolve("speechlike-300s-48k-stereo.m4a");
        Process p = new ProcessBuilder(List.of("ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y",
                "-f", "lavfi", "-i", "aevalsrc=0.4*sin(2*PI*(200+30*mod(t\\,10))*t)+0.05*(random(0)-0.5)|"
                        + "0.3*sin(2*PI*523*t)*(1+0.5*sin(2*PI*3*t)):s=48000:d=" + DECODE_SECONDS,
                "-c:a", "aac", "-b:a", "128k", m4a.toString())).redirectErrorStream(true).start();
        String log = new String(p.getInputStream().readAllBytes());
        if (p.waitFor() != 0) throw new IOException("ffmpeg failed making the benchmark clip: " + log);
        options = AudioDecoder.Options.whole().resampler(AudioReader.Resampler.valueOf(resampler));
        tenSeconds = new float[160_000];
        var rnd = new java.util.SplittableRandom(7);
        for (int i = 0; i < tenSeconds.length; i++) {
            tenSeconds[i] = (float) (0.4 * Math.sin(2 * Math.PI * (200 + 0.003 * i) * i / 16_000.0) + 0.05 * (rnd.nextDouble() - 0.5));
        }
        logMel = new WhisperLogMel();
        var valid = logMel.valid(tenSeconds, AudioPreset.QWEN2_5_OMNI);
        var padded = logMel.hfPadded(tenSeconds, AudioPreset.QWEN2_5_OMNI);
        System.out.printf("# 10 s clip: valid %d frames, %,d bytes; padded as Qwen2.5-Omni's processor %d frames, %,d bytes (%.1fx)%n",
                valid.frames(), valid.bytes(), padded.frames(), padded.bytes(), (double) padded.bytes() / valid.bytes());
    }

    @TearDown(Level.Trial)
    public void tearDown() throws IOException {
        Files.deleteIfExists(m4a);
        Files.deleteIfExists(dir);
    }

    @Benchmark
    public Object decodeResample() {
        if (!features.equals("valid")) return null; // one decode per resampler: the features param does not apply
        return AudioDecoder.decode(m4a, options, System.nanoTime() + 600_000_000_000L);
    }

    @Benchmark
    public Object logMel10s() {
        if (!resampler.equals("SOXR_HQ")) return null; // one run per features mode: the resampler param does not apply
        return features.equals("valid") ? logMel.valid(tenSeconds, AudioPreset.QWEN2_5_OMNI)
                : logMel.hfPadded(tenSeconds, AudioPreset.QWEN2_5_OMNI);
    }
}
