package dev.stoker.bench;

import dev.stoker.core.AudioPreset;
import dev.stoker.audio.AudioDecoder;
import dev.stoker.audio.WhisperLogMel;
import dev.stoker.video.ffmpeg.AudioReader;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.function.Supplier;

/**
 * {@link AudioBenchmark}'s operations timed by the running thread's CPU time (ThreadMXBean) instead of the wall
 * clock: on a machine shared with other work the wall time of one thread includes the time it waited for a core,
 * its CPU time does not, so this is the "per core" figure that a loaded machine can still measure.
 *
 * <p>Run: {@code java -cp 'stoker-bench/target/stoker-bench.jar:stoker-bench/target/lib/*' dev.stoker.bench.AudioCpuTime
 * CLIP.m4a SECONDS [ROUNDS]} with an M4A made as AudioBenchmark makes it.
 */
public final class AudioCpuTime {
    private AudioCpuTime() {}

    public static void main(String[] args) {
        Path clip = Path.of(args[0]);
        double seconds = Double.parseDouble(args[1]);
        int rounds = args.length > 2 ? Integer.parseInt(args[2]) : 7;
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        for (var r : AudioReader.Resampler.values()) {
            var opts = AudioDecoder.Options.whole().resampler(r);
            double[] ms = time(mx, rounds, () -> AudioDecoder.decode(clip, opts, System.nanoTime() + 600_000_000_000L));
            System.out.printf("decode+resample %s, %.0f s clip: CPU ms min %.1f median %.1f -> %.0fx / %.0fx real time per core%n",
                    r, seconds, ms[0], ms[ms.length / 2], seconds * 1000 / ms[0], seconds * 1000 / ms[ms.length / 2]);
        }
        float[] ten = new float[160_000];
        for (int i = 0; i < ten.length; i++) ten[i] = (float) (0.4 * Math.sin(2 * Math.PI * (200 + 0.003 * i) * i / 16_000.0));
        var lm = new WhisperLogMel();
        for (int k = 0; k < 300; k++) lm.valid(ten, AudioPreset.QWEN2_5_OMNI); // JIT: C2 has the frame loop
        double[] v = time(mx, rounds * 5, () -> lm.valid(ten, AudioPreset.QWEN2_5_OMNI));
        double[] p = time(mx, rounds, () -> lm.hfPadded(ten, AudioPreset.QWEN2_5_OMNI));
        System.out.printf("log-mel 10 s valid (1000 frames, 512,000 B): CPU ms min %.2f median %.2f%n", v[0], v[v.length / 2]);
        System.out.printf("log-mel 10 s hfPadded qwen2.5-omni (30000 frames, 15,360,000 B): CPU ms min %.2f median %.2f%n", p[0], p[p.length / 2]);
    }

    private static double[] time(ThreadMXBean mx, int rounds, Supplier<Object> op) {
        op.get();
        double[] ms = new double[rounds];
        for (int i = 0; i < rounds; i++) {
            long t0 = mx.getCurrentThreadCpuTime();
            Object o = op.get();
            ms[i] = (mx.getCurrentThreadCpuTime() - t0) / 1e6;
            if (o == null) throw new IllegalStateException();
        }
        Arrays.sort(ms);
        return ms;
    }
}
