package dev.stoker.audio;

import dev.stoker.core.AudioPreset;
import org.jtransforms.fft.DoubleFFT_1D;

/**
 * Whisper log-mel features as transformers 5.18.0's {@code WhisperFeatureExtractor} computes them on its numpy path
 * ({@code _np_extract_fbank_features} over {@code audio_utils.spectrogram}) with the Qwen audio families' settings:
 * 16 kHz, {@code n_fft} 400, hop 160, a periodic Hann window, reflect padding of 200 samples at both ends, power
 * spectrum, 128 Slaney-normalised Slaney-scale mel filters from 0 to 8 kHz, {@code log10(max(1e-10, ·))}, the last
 * frame dropped, a floor at the maximum minus 8, then {@code (x + 4) / 4}; dither 0.
 *
 * <p><b>Where the numbers round as there.</b> Frames, window, FFT and mel products in float64; the FFT's output
 * rounded to complex64 (the reference stores it in a complex64 array) before the power; the log rounded to float32;
 * the floor and the scaling in float32 (numpy 2's weak Python scalars keep float32). The FFT is JTransforms'
 * mixed-radix real FFT (400 = 4·4·5·5), not pocketfft, so a value could differ from the reference in its last float32
 * bit; measured, none does: max |Δ| 0 on the committed fixtures and on the 32 clips of tools/audio-check, given the
 * same PCM.
 *
 * <p><b>Valid frames, and the padded mode.</b> The reference pads the waveform with zeros to a length {@code P}
 * ({@link AudioPreset#paddedSamples}) before the spectrogram, and marks {@link AudioPreset#maskFrames} frames valid.
 * {@link #valid} computes exactly those valid frames of that same padded computation (so they equal
 * {@code input_features[:, mask]} of the processor's output, the frames the model consumes), without the padding:
 * only frames whose window reaches a real sample are transformed, the rest are known to be {@code log10(1e-10)}.
 * {@link #hfPadded} gives all {@code P/160} frames, for byte parity with the processor (Qwen2.5-Omni: 30,000
 * frames, 15.4 MB, for any clip).
 *
 * <p>Threading: an instance holds its FFT plan and buffers; one per thread.
 */
public final class WhisperLogMel {
    private static final int N_FFT = AudioPreset.N_FFT;
    private static final int HOP = AudioPreset.HOP_LENGTH;
    private static final int HALF = N_FFT / 2;
    private static final int BINS = N_FFT / 2 + 1;
    private static final int MELS = AudioPreset.MEL_BINS;
    private static final double MEL_FLOOR = 1e-10;
    /** {@code float32(log10(1e-10))}: a frame that sees no sample. */
    private static final float SILENT_LOG = (float) Math.log10(MEL_FLOOR);

    private static final double[] WINDOW = hannPeriodic(N_FFT);
    /** Per mel bin: its first FFT bin with a non-zero weight, and the weights from there. */
    private static final int[] FILTER_START = new int[MELS];
    private static final double[][] FILTER = new double[MELS][];

    static {
        double[][] dense = melFilters(BINS, MELS, 0.0, 8000.0, AudioDecoder.SAMPLE_RATE_HZ);
        for (int m = 0; m < MELS; m++) {
            int first = -1, last = -1;
            for (int f = 0; f < BINS; f++) {
                if (dense[f][m] != 0.0) {
                    if (first < 0) first = f;
                    last = f;
                }
            }
            if (first < 0) throw new IllegalStateException("mel filter " + m + " is empty");
            FILTER_START[m] = first;
            FILTER[m] = new double[last - first + 1];
            for (int f = first; f <= last; f++) FILTER[m][f - first] = dense[f][m];
        }
    }

    /**
     * Log-mel features, row-major {@code (128, frames)} as the reference's {@code input_features[i]}.
     *
     * @param values      {@code 128 · frames} float32, mel bin major
     * @param frames      frames held
     * @param validFrames frames the attention mask marks valid (the first ones); equal to {@code frames} in the
     *                    valid mode
     */
    public record Features(float[] values, int frames, int validFrames) {
        public float get(int mel, int frame) { return values[mel * frames + frame]; }

        /** The processor's {@code feature_attention_mask} row (int32 there): 1 for the valid frames, then 0. */
        public int[] attentionMask() {
            int[] mask = new int[frames];
            java.util.Arrays.fill(mask, 0, validFrames, 1);
            return mask;
        }

        /** Bytes as float32. */
        public long bytes() { return 4L * values.length; }
    }

    private final DoubleFFT_1D fft = new DoubleFFT_1D(N_FFT);
    private final double[] frame = new double[N_FFT];
    private final double[] power = new double[BINS];

    /**
     * The valid frames of {@code pcm} (16 kHz mono; all of it is the clip) as {@code family}'s processor computes
     * them for this clip alone: truncated and padded as there ({@link AudioPreset}), only the masked frames kept.
     */
    public Features valid(float[] pcm, AudioPreset family) {
        long kept = family.keptSamples(pcm.length);
        long padded = family.paddedSamples(pcm.length);
        return compute(pcm, (int) kept, padded, AudioPreset.maskFrames(kept, padded));
    }

    /**
     * As {@link #valid(float[], AudioPreset)} for a clip beside others in one processor call whose longest has
     * {@code longestInCall} samples (only Qwen3-Omni pads to it).
     */
    public Features valid(float[] pcm, AudioPreset family, long longestInCall) {
        long kept = family.keptSamples(pcm.length);
        long padded = family.paddedSamples(pcm.length, longestInCall);
        return compute(pcm, (int) kept, padded, AudioPreset.maskFrames(kept, padded));
    }

    /** Every frame the processor computes for this clip alone ({@code --audio-pad hf}), padding included. */
    public Features hfPadded(float[] pcm, AudioPreset family) {
        long kept = family.keptSamples(pcm.length);
        long padded = family.paddedSamples(pcm.length);
        return compute(pcm, (int) kept, padded, AudioPreset.totalFrames(padded));
    }

    /**
     * The frames of {@link #compute} that decide all of them (the cache's entry, issue 32): the valid frames, then the at
     * most two frames past them whose window still reaches the clip ({@code ceil((n+200)/160) - ceil(n/160) <= 2}), then
     * one frame that sees no sample — every later frame equals that one (the silent value, {@code (max(-10, max-8)+4)/4},
     * the same in every mel bin). So {@code valid + 3} frames, or all of them when there are fewer.
     */
    public static int headFrames(long samples, long paddedSamples) {
        return Math.min(AudioPreset.totalFrames(paddedSamples), AudioPreset.maskFrames(samples, paddedSamples) + 3);
    }

    /** {@link #compute}'s first {@link #headFrames} frames: what {@link #slice} and {@link #padTo} make both modes' features of. */
    public Features head(float[] pcm, int samples, long paddedSamples) {
        return compute(pcm, samples, paddedSamples, headFrames(samples, paddedSamples));
    }

    /** The first {@code frames} frames of {@code f} ({@code f} itself when it has that many). */
    public static Features slice(Features f, int frames) {
        if (frames == f.frames()) return f;
        if (frames < 1 || frames > f.frames()) throw new IllegalArgumentException("frames " + frames + " of " + f.frames());
        float[] out = new float[MELS * frames];
        for (int m = 0; m < MELS; m++) System.arraycopy(f.values(), m * f.frames(), out, m * frames, frames);
        return new Features(out, frames, Math.min(frames, f.validFrames()));
    }

    /**
     * {@code head} ({@link #head}'s frames) widened to {@code total} frames by repeating its last frame, which is then a
     * silent one ({@link #headFrames}): {@link #compute}'s {@code total} frames bit for bit.
     */
    public static Features padTo(Features head, int total) {
        if (total == head.frames()) return head;
        if (total < head.frames()) throw new IllegalArgumentException("total " + total + " < " + head.frames());
        int h = head.frames();
        float[] out = new float[Math.multiplyExact(MELS, total)];
        for (int m = 0; m < MELS; m++) {
            System.arraycopy(head.values(), m * h, out, m * total, h);
            java.util.Arrays.fill(out, m * total + h, (m + 1) * total, head.values()[m * h + h - 1]);
        }
        return new Features(out, total, head.validFrames());
    }

    /**
     * The reference's features of {@code pcm[0, samples)} zero-padded to {@code paddedSamples}, of which the first
     * {@code emitFrames} frames are returned (at most {@code paddedSamples / 160}). The floor "maximum minus 8" is
     * taken over all {@code paddedSamples / 160} frames, as there.
     */
    public Features compute(float[] pcm, int samples, long paddedSamples, int emitFrames) {
        if (samples < 1 || samples > pcm.length) {
            throw new IllegalArgumentException("samples " + samples + " of a clip of " + pcm.length);
        }
        if (paddedSamples < samples) throw new IllegalArgumentException("padded " + paddedSamples + " < " + samples);
        int total = AudioPreset.totalFrames(paddedSamples);
        if (total == 0) {
            throw new IllegalArgumentException("a clip of " + samples + " samples padded to " + paddedSamples
                    + " has no frame (the feature extractor needs at least " + HOP + " samples)");
        }
        if (emitFrames < 0 || emitFrames > total) throw new IllegalArgumentException("emit " + emitFrames + " of " + total);
        // frames whose window reaches a real sample (or, near the padded end, its reflection)
        int computed = paddedSamples - (HALF + 1) < samples ? total
                : (int) Math.min(total, (samples + HALF + HOP - 1L) / HOP);
        long cells = (long) MELS * emitFrames;
        if (cells > Integer.MAX_VALUE - 8) throw new IllegalArgumentException(emitFrames + " frames do not fit an array");
        float[] out = new float[(int) cells];
        float max = computed < total ? SILENT_LOG : Float.NEGATIVE_INFINITY;
        for (int i = 0; i < computed; i++) {
            powerSpectrum(pcm, samples, paddedSamples, i);
            for (int m = 0; m < MELS; m++) {
                double[] w = FILTER[m];
                int f0 = FILTER_START[m];
                double e = 0;
                for (int k = 0; k < w.length; k++) e += w[k] * power[f0 + k];
                float log = (float) Math.log10(Math.max(MEL_FLOOR, e));
                if (log > max) max = log;
                if (i < emitFrames) out[m * emitFrames + i] = log;
            }
        }
        float floor = max - 8.0f;
        int held = Math.min(computed, emitFrames);
        float silent = (Math.max(SILENT_LOG, floor) + 4.0f) / 4.0f;
        for (int m = 0; m < MELS; m++) {
            int row = m * emitFrames;
            for (int i = 0; i < held; i++) out[row + i] = (Math.max(out[row + i], floor) + 4.0f) / 4.0f;
            for (int i = held; i < emitFrames; i++) out[row + i] = silent;
        }
        return new Features(out, emitFrames, Math.min(emitFrames, AudioPreset.maskFrames(samples, paddedSamples)));
    }

    /** Frame {@code i}'s power spectrum into {@link #power}. */
    private void powerSpectrum(float[] pcm, int samples, long padded, int i) {
        long start = (long) i * HOP - HALF;
        if (start >= 0 && start + N_FFT <= samples) { // inside the clip: no padding to resolve
            int s0 = (int) start;
            for (int k = 0; k < N_FFT; k++) frame[k] = (double) pcm[s0 + k] * WINDOW[k];
        } else {
            for (int k = 0; k < N_FFT; k++) {
                long j = reflect(start + k, padded);
                frame[k] = (j < samples ? (double) pcm[(int) j] : 0.0) * WINDOW[k];
            }
        }
        fft.realForward(frame);
        // numpy keeps the rfft output in a complex64 array: each part rounded to float32 before the power
        power[0] = sq((float) frame[0]);
        power[BINS - 1] = sq((float) frame[1]);
        for (int f = 1; f < BINS - 1; f++) power[f] = sq((float) frame[2 * f]) + sq((float) frame[2 * f + 1]);
    }

    private static double sq(float x) { return (double) x * x; }

    /** numpy's {@code pad(mode="reflect")} index into a signal of {@code n} samples (reflections repeat for short ones). */
    static long reflect(long j, long n) {
        if (n == 1) return 0;
        while (j < 0 || j >= n) {
            if (j < 0) j = -j;
            if (j >= n) j = 2 * (n - 1) - j;
        }
        return j;
    }

    /** {@code window_function(n, "hann")}, periodic: {@code np.hanning(n + 1)[:-1]} with numpy's formula. */
    static double[] hannPeriodic(int n) {
        int m = n + 1;
        double[] w = new double[n];
        for (int k = 0; k < n; k++) {
            int x = 1 - m + 2 * k;
            w[k] = 0.5 + 0.5 * Math.cos(Math.PI * x / (m - 1));
        }
        return w;
    }

    /** {@code audio_utils.mel_filter_bank(norm="slaney", mel_scale="slaney")}: {@code (bins, mels)}. */
    static double[][] melFilters(int bins, int mels, double minHz, double maxHz, int sampleRate) {
        double melMin = hertzToMel(minHz), melMax = hertzToMel(maxHz);
        double[] melFreqs = linspace(melMin, melMax, mels + 2);
        double[] filterFreqs = new double[mels + 2];
        for (int i = 0; i < filterFreqs.length; i++) filterFreqs[i] = melToHertz(melFreqs[i]);
        double[] fftFreqs = linspace(0, sampleRate / 2, bins);
        double[] diff = new double[mels + 1];
        for (int i = 0; i < diff.length; i++) diff[i] = filterFreqs[i + 1] - filterFreqs[i];
        double[][] out = new double[bins][mels];
        for (int f = 0; f < bins; f++) {
            for (int m = 0; m < mels; m++) {
                double down = -(filterFreqs[m] - fftFreqs[f]) / diff[m];
                double up = (filterFreqs[m + 2] - fftFreqs[f]) / diff[m + 1];
                double v = Math.max(0.0, Math.min(down, up));
                out[f][m] = v * (2.0 / (filterFreqs[m + 2] - filterFreqs[m]));
            }
        }
        return out;
    }

    static double hertzToMel(double hz) {
        double mels = 3.0 * hz / 200.0;
        if (hz >= 1000.0) mels = 15.0 + Math.log(hz / 1000.0) * (27.0 / Math.log(6.4));
        return mels;
    }

    static double melToHertz(double mel) {
        double hz = 200.0 * mel / 3.0;
        if (mel >= 15.0) hz = 1000.0 * Math.exp(Math.log(6.4) / 27.0 * (mel - 15.0));
        return hz;
    }

    /** numpy's {@code linspace(start, stop, num)}: {@code i·step + start}, the last set to {@code stop}. */
    static double[] linspace(double start, double stop, int num) {
        double[] y = new double[num];
        double step = (stop - start) / (num - 1);
        for (int i = 0; i < num; i++) y[i] = i * step + start;
        y[num - 1] = stop;
        return y;
    }
}
