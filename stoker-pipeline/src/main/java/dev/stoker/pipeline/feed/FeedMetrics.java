package dev.stoker.pipeline.feed;

import dev.stoker.observe.PackStats;
import dev.stoker.source.LatencyHistogram;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.LongAdder;

/**
 * Per-stage counters of a feed (fetch, encode, assemble, deliver) and, per rank, buffer occupancy
 * and time to first batch; read as a {@link Snapshot}.
 *
 * <p>Threading: counters are {@link LongAdder}s written by pipeline threads; snapshots are not atomic
 * across counters.
 */
public final class FeedMetrics {
    final LongAdder fetchStarted = new LongAdder();
    final LongAdder fetchFailed = new LongAdder();
    final LongAdder fetchedSamples = new LongAdder();
    final LongAdder fetchedBytes = new LongAdder();
    final LongAdder fetchNanos = new LongAdder();
    final LongAdder encodeStarted = new LongAdder();
    final LongAdder encodedSamples = new LongAdder();
    final LongAdder encodeFailed = new LongAdder();
    final LongAdder encodeNanos = new LongAdder();
    final LongAdder assembledBatches = new LongAdder();
    final LongAdder assembledBytes = new LongAdder();
    final LongAdder assembleNanos = new LongAdder();
    final LongAdder copiedBytes = new LongAdder();
    final LongAdder deliveredBatches = new LongAdder();
    final LongAdder deliveredSamples = new LongAdder();
    /** Per source of a mix: its name, weight, and the samples delivered and skipped from it; null until the feed names its sources. */
    private volatile SourceCounts sources;
    final LongAdder skippedSamples = new LongAdder();
    /** CPU-pool threads running a task now (incremented and decremented around each task). */
    final LongAdder cpuBusy = new LongAdder();
    /** Summed time CPU-pool threads spent running tasks. */
    final LongAdder cpuBusyNanos = new LongAdder();

    /** Per sample: first request to all bytes. */
    final LatencyHistogram fetchLatency = new LatencyHistogram();
    /** Per sample: CPU time of encode (heap modes) or prepare (ZERO_COPY). */
    final LatencyHistogram encodeLatency = new LatencyHistogram();
    /** Per sample: image decode (all of its images). */
    final LatencyHistogram decodeLatency = new LatencyHistogram();
    /** Per sample with the cache of preprocessed samples: its images' keys, entry reads (checks, zstd) and writes. */
    final LatencyHistogram cacheLatency = new LatencyHistogram();
    /** Per sample: resize, normalize and patchify (all of its images). */
    final LatencyHistogram transformLatency = new LatencyHistogram();
    /** Per sample with videos: decoding its videos' sampled frames, with their RGB conversion and resize. */
    final LatencyHistogram videoDecodeLatency = new LatencyHistogram();
    /** Video frames decoded and kept: their ratio is what seeking and skipping saved (1.0 the least possible). */
    final LongAdder videoFramesDecoded = new LongAdder(), videoFramesKept = new LongAdder(), videoDecodeNanos = new LongAdder();

    /** Per sample with audio clips (issue 32): decoding them (demux, decode, resample to 16 kHz mono). */
    final LatencyHistogram audioDecodeLatency = new LatencyHistogram();
    /** Per sample with audio clips: computing their log-mel features. */
    final LatencyHistogram audioFeatureLatency = new LatencyHistogram();
    /**
     * The clips of the samples encoded (decoded or from the cache), their 16 kHz samples, and the bytes of input_features and
     * feature_attention_mask made for them: counted per sample encoded, as {@link #encodedSamples} is.
     */
    private long audioClips, audioSamples, audioFeatureBytes; // guarded by audioLock: added and read as one
    private final Object audioLock = new Object();

    /**
     * An audio job's figures (issue 32), counted as the feed encodes its samples for batches, as {@code encodedSamples} and the
     * video frame counts are (a sample encoded again, for a retry or a batch made again after a fault, counts again; one
     * encoded for a batch never handed out counts): the clips of those samples (decoded, or their features read from the
     * cache), the seconds of audio they hold, and bytes of {@code input_features} and {@code feature_attention_mask} made (the
     * batches widen a sample's rows to the batch's longest, so they carry at least as many).
     */
    public record Audio(long clips, double seconds, long featureBytes) {}

    /**
     * The audio figures; null for a feed that encoded no clip. One snapshot: a sample's clips, seconds and bytes are added
     * together, so the three agree while the feed encodes ahead (read one after another, a sample added between the reads
     * counted its bytes and not its clips).
     */
    Audio audio() {
        synchronized (audioLock) {
            return audioClips == 0 ? null
                    : new Audio(audioClips, audioSamples / (double) dev.stoker.core.AudioPreset.SAMPLING_RATE, audioFeatureBytes);
        }
    }

    /** Video decoding's figures for the verdict: its share of the CPU stage's busy time, frames decoded per kept; null: none yet. */
    dev.stoker.observe.Bottleneck.Video videoFigures() {
        long kept = videoFramesKept.sum(), busy = cpuBusyNanos.sum();
        if (kept == 0 || busy == 0) return null;
        return new dev.stoker.observe.Bottleneck.Video(Math.min(1.0, (double) videoDecodeNanos.sum() / busy),
                (double) videoFramesDecoded.sum() / kept);
    }
    /** Per sample: chat template and tokenization. */
    final LatencyHistogram tokenizeLatency = new LatencyHistogram();
    /** Per sample (ZERO_COPY): decode + transform into shared memory. */
    final LatencyHistogram pixelWriteLatency = new LatencyHistogram();
    /** Per batch: collation, or final write and seal. */
    final LatencyHistogram assembleLatency = new LatencyHistogram();
    /** Per batch: from next() to the batch handed out. */
    final LatencyHistogram deliverLatency = new LatencyHistogram();
    /** Summed over batches: from next() to the batch handed out (the trainers' wait as the feed sees it; the autotuner reads it). */
    final LongAdder deliverWaitNanos = new LongAdder();

    /** Stage names in the order reports show them. */
    public static final List<String> STAGES = List.of("fetch", "first_byte", "encode", "decode", "cache", "video_decode", "audio_decode",
            "audio_features", "transform", "tokenize", "pixel_write", "assemble", "deliver");

    FeedMetrics() {}

    /** Records the encoder's per-stage times of the call that just ended (those it spent any time in). */
    void recordStages(dev.stoker.encode.SampleEncoder encoder) {
        if (encoder.decodeNanos() > 0) decodeLatency.record(encoder.decodeNanos());
        if (encoder.cacheNanos() > 0) cacheLatency.record(encoder.cacheNanos());
        if (encoder.transformNanos() > 0) transformLatency.record(encoder.transformNanos());
        if (encoder.tokenizeNanos() > 0) tokenizeLatency.record(encoder.tokenizeNanos());
        if (encoder.videoDecodeNanos() > 0) {
            videoDecodeLatency.record(encoder.videoDecodeNanos());
            videoDecodeNanos.add(encoder.videoDecodeNanos());
            videoFramesDecoded.add(encoder.videoFramesDecoded());
            videoFramesKept.add(encoder.videoFramesKept());
        }
        if (encoder.audioDecodeNanos() > 0) audioDecodeLatency.record(encoder.audioDecodeNanos());
        if (encoder.audioFeatureBytes() > 0) audioFeatureLatency.record(encoder.audioFeatureNanos());
        if (encoder.audioClips() > 0 || encoder.audioFeatureBytes() > 0)
            synchronized (audioLock) {
                audioClips += encoder.audioClips();
                audioSamples += encoder.audioSamples();
                audioFeatureBytes += encoder.audioFeatureBytes();
            }
        encoder.resetTimes();
    }

    /** Marks a CPU-pool task as started; returns its start time for {@link #cpuEnd}. */
    long cpuStart() {
        cpuBusy.increment();
        return System.nanoTime();
    }

    void cpuEnd(long startNanos) {
        cpuBusyNanos.add(System.nanoTime() - startNanos);
        cpuBusy.decrement();
    }

    /** CPU-pool threads busy right now. */
    public long cpuBusyNow() { return cpuBusy.sum(); }

    /** A packed job's per-step record of packing and balance; never recorded into for an unpacked job. */
    final PackStats pack = new PackStats();

    /**
     * The per-step record of packing: the feed calls {@link PackStats#record} once a rank takes a packed batch (the first
     * call for a step wins).
     */
    public PackStats pack() { return pack; }

    /** Samples whose fetch has begun and not ended (succeeded or failed). */
    public long fetchInFlight() { return Math.max(0, fetchStarted.sum() - fetchedSamples.sum() - fetchFailed.sum()); }

    /**
     * One stage's latency distribution, in nanoseconds.
     */
    public record Stage(long count, long meanNanos, long p50Nanos, long p90Nanos, long p99Nanos, long maxNanos) {
        public static Stage of(LatencyHistogram h) {
            return new Stage(h.count(), h.meanNanos(), h.percentileNanos(0.5), h.percentileNanos(0.9), h.percentileNanos(0.99), h.maxNanos());
        }

        /** Snake-case map in milliseconds, as run data and reports use it ({@code docs/run-data.md}). */
        public Map<String, Object> toJson() {
            var m = new LinkedHashMap<String, Object>();
            m.put("count", count);
            m.put("mean_ms", meanNanos / 1e6);
            m.put("p50_ms", p50Nanos / 1e6);
            m.put("p90_ms", p90Nanos / 1e6);
            m.put("p99_ms", p99Nanos / 1e6);
            m.put("max_ms", maxNanos / 1e6);
            return m;
        }
    }

    /** Stages with at least one observation, keyed by {@link #STAGES} names; {@code firstByte} may be null. */
    Map<String, Stage> stages(LatencyHistogram firstByte) {
        var m = new LinkedHashMap<String, Stage>();
        put(m, "fetch", fetchLatency);
        if (firstByte != null) put(m, "first_byte", firstByte);
        put(m, "encode", encodeLatency);
        put(m, "decode", decodeLatency);
        put(m, "cache", cacheLatency);
        put(m, "video_decode", videoDecodeLatency);
        put(m, "audio_decode", audioDecodeLatency);
        put(m, "audio_features", audioFeatureLatency);
        put(m, "transform", transformLatency);
        put(m, "tokenize", tokenizeLatency);
        put(m, "pixel_write", pixelWriteLatency);
        put(m, "assemble", assembleLatency);
        put(m, "deliver", deliverLatency);
        return m;
    }

    private static void put(Map<String, Stage> m, String name, LatencyHistogram h) {
        if (h.count() > 0) m.put(name, Stage.of(h));
    }

    /**
     * Counters since the feed started.
     *
     * @param fetchStarted    samples whose fetch began
     * @param fetchedSamples  samples whose bytes all arrived
     * @param fetchNanos      summed latency of those fetches (request to last byte)
     * @param encodeStarted   samples handed to the CPU pool
     * @param encodedSamples  samples encoded successfully
     * @param fetchFailed     samples whose line or an image could not be read (counted when it happened, prefetched or not)
     * @param encodeNanos     summed CPU-pool time of encodes (successful or not)
     * @param skippedSamples  samples left out of delivered batches: errors and filtered
     * @param skippedByStage  skipped samples recorded by the feed's {@link FeedErrors}, per stage (lower-case
     *                        {@code SampleException.Stage} names, every stage present)
     * @param errorSamples    of the recorded skipped samples, the broken ones (what {@code --max-error-rate} counts)
     * @param filteredSamples of the recorded skipped samples, those dropped by a limit the user set ({@code --max-seq-len},
     *                        {@code --max-images})
     * @param skippedByCause  the recorded skipped samples per kind, stage and cause class, the most common first (at most
     *                        {@link FeedErrors#MAX_CAUSES} causes, then one "other" per kind and stage)
     * @param copiedBytes     bytes copied after the transform to build batches: every tensor byte when batches are
     *                        assembled on the heap; in ZERO_COPY only rows moved to close a gap left by a failed sample
     * @param cpuBusyNanos    summed time CPU-pool threads ran tasks
     * @param stages          per-stage latency distributions (only stages with observations), keyed by {@link #STAGES} names
     * @param sources         per source, in the order given, what it was scheduled for and delivered (one entry for one source)
     * @param pack            a packed job's packing and balance figures ({@link PackStats#summary()}); null for an unpacked
     *                        job and before a packed job's first step
     * @param audio           an audio job's clips, seconds of audio and feature bytes ({@link Audio}); null when no clip
     *                        was decoded
     */
    public record Snapshot(long fetchStarted, long fetchedSamples, long fetchFailed, long fetchedBytes, long fetchNanos,
                           long encodeStarted, long encodedSamples, long encodeFailed, long encodeNanos,
                           long assembledBatches, long assembledBytes, long assembleNanos, long copiedBytes,
                           long deliveredBatches, long deliveredSamples, long skippedSamples, Map<String, Long> skippedByStage,
                           long errorSamples, long filteredSamples, List<FeedErrors.Cause> skippedByCause, long cpuBusyNanos, List<Rank> ranks, Map<String, Stage> stages,
                           List<Source> sources, PackStats.Summary pack, Audio audio) {

        /** A snapshot without audio figures. */
        public Snapshot(long fetchStarted, long fetchedSamples, long fetchFailed, long fetchedBytes, long fetchNanos,
                        long encodeStarted, long encodedSamples, long encodeFailed, long encodeNanos,
                        long assembledBatches, long assembledBytes, long assembleNanos, long copiedBytes,
                        long deliveredBatches, long deliveredSamples, long skippedSamples, Map<String, Long> skippedByStage,
                        long errorSamples, long filteredSamples, List<FeedErrors.Cause> skippedByCause, long cpuBusyNanos, List<Rank> ranks,
                        Map<String, Stage> stages, List<Source> sources, PackStats.Summary pack) {
            this(fetchStarted, fetchedSamples, fetchFailed, fetchedBytes, fetchNanos, encodeStarted, encodedSamples, encodeFailed, encodeNanos,
                    assembledBatches, assembledBytes, assembleNanos, copiedBytes, deliveredBatches, deliveredSamples, skippedSamples,
                    skippedByStage, errorSamples, filteredSamples, skippedByCause, cpuBusyNanos, ranks, stages, sources, pack, null);
        }

        public long bufferedBatches() { return ranks.stream().mapToLong(Rank::bufferedBatches).sum(); }

        public long bufferedBytes() { return ranks.stream().mapToLong(Rank::bufferedBytes).sum(); }
    }

    /**
     * One rank's buffer and start-up figures.
     *
     * @param bufferedBatches      batches ready in its buffer now (the buffer figures are 0 outside PREFETCH)
     * @param bufferedBytes        their bytes
     * @param peakBufferedBytes    the most bytes its buffer held at once
     * @param producerWaits        times a ready batch had to wait for buffer space (back-pressure)
     * @param consumerWaits        times next() found no batch ready
     * @param deliveredBatches     batches handed to the trainer
     * @param firstBatchReadyNanos from feeder start (pipeline up) to the first batch ready; -1 before it
     * @param firstRequestNanos    from the first next() to its completion; -1 before it
     */
    public record Rank(int rank, long bufferedBatches, long bufferedBytes, long peakBufferedBytes, long producerWaits,
                       long consumerWaits, long deliveredBatches, long firstBatchReadyNanos, long firstRequestNanos) {}

    /** Counts per source from now on: records numbered across sources from {@code bases} (ascending, the first 0). */
    void sources(List<String> names, double[] weights, int[] placesPerEpoch, int[] bases) {
        sources = new SourceCounts(List.copyOf(names), weights.clone(), placesPerEpoch.clone(), bases.clone());
    }

    /** Counts a delivered batch's samples and skipped samples against their sources. */
    void countSources(dev.stoker.encode.batch.FeedBatch b) {
        var s = sources;
        if (s == null) return;
        for (int index : b.datasetIndices()) s.delivered[s.sourceOf(index)].increment();
        for (var k : b.skippedSamples()) s.skipped[s.sourceOf(k.datasetIndex())].increment();
    }

    /**
     * One source's share of what was delivered.
     *
     * @param weight     its weight: passes over it per epoch of the mix
     * @param places     samples it is scheduled for in each epoch of the mix (weight × its records, rounded)
     * @param scheduled  its samples in delivered batches: delivered + skipped
     * @param share      its delivered samples over all delivered samples (0 before any)
     */
    public record Source(String name, double weight, long places, long scheduled, long delivered, long skipped, double share) {}

    /** Per source, in the order given: empty until the feed has named its sources. */
    public List<Source> sourceCounts() {
        var s = sources;
        if (s == null) return List.of();
        long all = 0;
        for (var d : s.delivered) all += d.sum();
        var out = new java.util.ArrayList<Source>(s.names.size());
        for (int i = 0; i < s.names.size(); i++) {
            long d = s.delivered[i].sum(), k = s.skipped[i].sum();
            out.add(new Source(s.names.get(i), s.weights[i], s.places[i], d + k, d, k, all == 0 ? 0 : (double) d / all));
        }
        return out;
    }

    private static final class SourceCounts {
        final List<String> names;
        final double[] weights;
        final int[] places, bases;
        final LongAdder[] delivered, skipped;

        SourceCounts(List<String> names, double[] weights, int[] places, int[] bases) {
            this.names = names;
            this.weights = weights;
            this.places = places;
            this.bases = bases;
            this.delivered = new LongAdder[names.size()];
            this.skipped = new LongAdder[names.size()];
            for (int i = 0; i < delivered.length; i++) {
                delivered[i] = new LongAdder();
                skipped[i] = new LongAdder();
            }
        }

        int sourceOf(int index) {
            int i = java.util.Arrays.binarySearch(bases, index);
            return Math.max(0, i >= 0 ? i : -i - 2);
        }
    }

    Snapshot snapshot(List<Rank> ranks, LatencyHistogram firstByte, FeedErrors.Counts skipped) {
        var byStage = new LinkedHashMap<String, Long>();
        for (var stage : dev.stoker.core.SampleException.Stage.values())
            byStage.put(stage.name().toLowerCase(java.util.Locale.ROOT), skipped.byStage().getOrDefault(stage, 0L));
        return new Snapshot(fetchStarted.sum(), fetchedSamples.sum(), fetchFailed.sum(), fetchedBytes.sum(), fetchNanos.sum(),
                encodeStarted.sum(), encodedSamples.sum(), encodeFailed.sum(), encodeNanos.sum(),
                assembledBatches.sum(), assembledBytes.sum(), assembleNanos.sum(), copiedBytes.sum(),
                deliveredBatches.sum(), deliveredSamples.sum(), skippedSamples.sum(), java.util.Collections.unmodifiableMap(byStage),
                skipped.errors(), skipped.filtered(), skipped.causes(), cpuBusyNanos.sum(),
                List.copyOf(ranks), java.util.Collections.unmodifiableMap(stages(firstByte)), sourceCounts(), pack.summary(), audio());
    }
}
