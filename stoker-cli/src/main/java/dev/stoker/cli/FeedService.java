package dev.stoker.cli;

import dev.stoker.pipeline.batch.Batch;
import dev.stoker.pipeline.batch.StoredBatch;
import dev.stoker.pipeline.feed.FeedMode;
import dev.stoker.pipeline.feed.Feeder;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.transport.BatchLayout;
import dev.stoker.transport.BatchProvider;
import dev.stoker.transport.Tensor;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicLongArray;

/**
 * A running {@link Feeder} as the {@link BatchProvider} of a trainer server: heap batches (serial,
 * concurrent, prefetch) go by value; ZERO_COPY batches by reference to their shared-memory object,
 * each hand-out holding its own lease until the trainer releases it.
 *
 * <p>Threading: safe from the server's connection threads; per-rank positions are atomic.
 */
final class FeedService implements BatchProvider, AutoCloseable {
    private final Feeder feeder;
    private final ShmObjectStore store;
    private final long expectedBatchBytes;
    private final AtomicLongArray nextStep;
    private final long endStep;

    /**
     * Serves {@code feeder}; closes it, and {@code store} (may be null) after it, on {@link #close()}.
     * Each rank's feed ends after {@code steps} steps (0: never).
     */
    FeedService(Feeder feeder, ShmObjectStore store, long expectedBatchBytes, long steps) {
        this.feeder = feeder;
        this.store = store;
        this.expectedBatchBytes = expectedBatchBytes;
        this.nextStep = new AtomicLongArray(feeder.config().ranks());
        var start = feeder.config().start();
        long first = start.epoch() * feeder.schedule().stepsPerEpoch() + start.position() / feeder.schedule().positionsPerStep();
        for (int r = 0; r < nextStep.length(); r++) nextStep.set(r, first);
        this.endStep = steps > 0 ? first + steps : Long.MAX_VALUE;
    }

    Feeder feeder() { return feeder; }

    ShmObjectStore store() { return store; }

    int ranks() { return feeder.config().ranks(); }

    @Override
    public void validate(int rank, int world) {
        if (world != ranks()) throw new IllegalArgumentException("world size " + world + " differs from the job's " + ranks());
        if (rank < 0 || rank >= world) throw new IllegalArgumentException("rank " + rank + " is outside the world size " + world);
    }

    @Override
    public Joined join(int rank, long resumeStep, long fingerprint) {
        if (fingerprint != 0 && fingerprint != feeder.fingerprint())
            throw new IllegalArgumentException("the saved state is from another data set or configuration (fingerprint "
                    + Long.toHexString(fingerprint) + ", this job's is " + Long.toHexString(feeder.fingerprint()) + ")");
        long at = nextStep.get(rank);
        if (resumeStep >= 0 && resumeStep != at)
            throw new IllegalArgumentException("rank " + rank + " asks to resume at step " + resumeStep + " but its feed is at step " + at
                    + "; start the service at that step (--start-step " + resumeStep + ")");
        return new Joined(at, feeder.fingerprint(), feeder.schedule().stepsPerEpoch());
    }

    @Override
    public long expectedBatchBytes() { return expectedBatchBytes; }

    @Override
    public boolean sharedMemory() { return feeder.config().mode() == FeedMode.ZERO_COPY; }

    @Override
    public CompletableFuture<? extends Delivery> next(int rank) {
        if (nextStep.get(rank) >= endStep) return CompletableFuture.completedFuture(null);
        if (sharedMemory()) {
            return feeder.storedRank(rank).next().thenApply(b -> {
                nextStep.incrementAndGet(rank);
                return stored(b);
            });
        }
        return feeder.rank(rank).next().thenApply(b -> {
            nextStep.incrementAndGet(rank);
            return toTensors(b, ranks());
        });
    }

    /** The hand-out of a stored batch: a lease of its own, then the pipeline's hold dropped. */
    static Stored stored(StoredBatch b) {
        var lease = b.object().lease();
        b.release();
        var object = b.object();
        return new Stored(object.file(), object.offset(), b.sizeBytes(), object.segment().asSlice(0, b.sizeBytes()), lease::close);
    }

    static Prepared toTensors(Batch b, int world) {
        int bs = b.samples(), len = b.length();
        var tensors = new ArrayList<Tensor>();
        tensors.add(Tensor.of("input_ids", b.inputIds(), bs, len));
        tensors.add(Tensor.of("labels", b.labels(), bs, len));
        tensors.add(Tensor.of("attention_mask", b.attentionMask(), bs, len));
        tensors.add(Tensor.of("position_ids", b.positionIds(), 3, bs, len));
        tensors.add(Tensor.of("pixel_values", b.pixelValues(), b.layout().pixelRows(), b.layout().pixelRowLength()));
        tensors.add(Tensor.of("image_grid_thw", b.imageGridThw(), b.layout().images(), 3));
        long[] index = new long[bs];
        for (int i = 0; i < bs; i++) index[i] = b.datasetIndices()[i];
        tensors.add(Tensor.of("sample_index", index, bs));
        return new Prepared(new BatchLayout.Meta(b.epoch(), b.step(), b.rank(), world, bs, b.scheduled(), b.globalStep()), tensors);
    }

    /** The bottleneck verdict with the trainers' figures: their (steady) wait ratio and the transfer's share of it. */
    dev.stoker.pipeline.feed.BottleneckVerdict verdict(double trainerWaitRatio, java.util.OptionalDouble transferShare) {
        return dev.stoker.pipeline.feed.Bottleneck.classify(feeder.bottleneckInputs().withTrainer(trainerWaitRatio, transferShare));
    }

    /** The pipeline's and the store's counters, for the run's JSON. */
    Map<String, Object> metrics() {
        var m = new LinkedHashMap<String, Object>();
        var snapshot = feeder.metrics();
        m.put("pipeline", snapshot);
        if (store != null) m.put("store", store.metrics());
        var stages = new LinkedHashMap<String, Object>(); // docs/run-data.md
        snapshot.stages().forEach((name, stage) -> stages.put(name, stage.toJson()));
        m.put("stages", stages);
        m.put("timeline", feeder.timeline().toJson());
        m.put("verdict", feeder.verdict().toJson());
        return m;
    }

    @Override
    public void close() {
        feeder.close();
        if (store != null) store.close();
    }
}
