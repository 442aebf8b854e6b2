package dev.stoker.pipeline.feed;

import dev.stoker.core.SampleException;
import dev.stoker.core.batch.BatchLayout;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.batch.BatchAssembler;
import dev.stoker.encode.batch.BatchSchema;
import dev.stoker.encode.batch.BatchShape;
import dev.stoker.encode.batch.DummyImage;
import dev.stoker.encode.batch.PackAssembler;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.store.Allocation;
import dev.stoker.store.ShmObjectStore;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Writes ZERO_COPY batches once, in place, into objects of the shared-memory store, in the
 * {@link BatchLayout} format: the batch's layout is planned from its prepared samples, the object
 * allocated (waiting for the store's byte budget), every sample's pixel rows decoded and transformed
 * by the CPU pool straight to their final offset, then the token tensors and the header written
 * and the object sealed. In the compact wire format the pixel tensor is each image's resized u8 RGB
 * pixels ({@code pixel_values_u8}), and the video tensor each video's resized frames ({@code pixel_values_videos_u8}),
 * written the same way, once, in place.
 *
 * <p>A sample that fails while its pixels are being written (a JPEG truncated after a valid header, an
 * OutOfMemoryError in its decode or resize)
 * is skipped like any other: the rows of the samples behind it are moved down to close the gap
 * (the only copy on this path, counted in {@code copiedBytes}) and the batch is re-planned.
 *
 * <p>A batch whose samples have no image gets the job's {@link DummyImage} under the text-only policy
 * DUMMY_IMAGE, planned with the batch and written with its tokens. A batch whose only images all fail is
 * left with its text-only samples and so gets the dummy too: its object is allocated large enough for
 * either outcome (re-planned, the dummy's tokens may make the batch longer than its plan was).
 *
 * <p>Packed mode ({@code packPadTo} > 0, a job with {@code --pack-tokens}): each scheduled batch is a rank's pack and
 * is written as the canonical pack ({@link PackAssembler}: the same bytes the heap path's {@code PackAssembler} gives,
 * laid out by {@link BatchSchema}): planned from the prepared samples (their tokens, rows and images, the dummy-image
 * segment where the planner asks for it, {@code scheduled.pack().dummyImage()[rank]}, or the text-only policy gives
 * it), pixels written once at their final offsets in segment order, then the token tensors and the segments'
 * metadata. The gaps a failed sample leaves are closed as above (a pack only shrinks when samples leave it).
 *
 * <p>Ownership: an object allocated here is this writer's until its batch is sealed and then until
 * the batch's holder calls {@link StoredBatch#release()}; when the feed stops, {@link #close()}
 * (called after the CPU pool has stopped, so nothing still writes) aborts the unsealed ones and
 * releases the sealed ones nobody released — including those dropped inside a killed stream —
 * and waits for allocations the store was still making a segment for (aborting them as they
 * arrive), so that a closed feed leaves nothing in use in the store.
 *
 * <p>Threading: {@link #allocate} completes on the thread that frees budget or on the caller;
 * {@link #fill} runs its pixel tasks and the final write on the CPU pool.
 */
final class StoredBatchWriter implements AutoCloseable {
    /** Batches of one rank stream whose pixels may be written at once. */
    static final int BATCHES_FILLING = 2;

    private static final ValueLayout.OfFloat FLOAT_LE = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfLong LONG_LE = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    private static final ValueLayout.OfInt INT_LE = ValueLayout.JAVA_INT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    /**
     * A batch whose object is allocated; its prepared samples' pixels are not written yet. {@code plannedDummy}: a pack the
     * planner gave the dummy-image segment (false when unpacked).
     */
    record Allocated(ScheduledBatch scheduled, List<SamplePipeline.Ready> ready, List<SamplePipeline.Failed> failed,
                     BatchLayout.Plan plan, Allocation allocation, boolean plannedDummy) {}

    private final ShmObjectStore store;
    private final CpuPool cpu;
    private final FeedMetrics metrics;
    private final int world;
    /** The feed's first rank: the store's shares are numbered from it. */
    private final int firstRank;
    private final int rowLength;
    private final boolean compact;
    /** The name of the pixel tensor: pixel_values, or pixel_values_u8 in the compact wire format. */
    private final String pixelTensor;
    /** The name of the video pixel tensor: pixel_values_videos, or pixel_values_videos_u8 in the compact wire format. */
    private final String videoTensor;
    private final dev.stoker.encode.EncodeOptions.PixelFormat pixelFormat;
    /** Which model inputs a batch carries and how it is padded. */
    private final dev.stoker.encode.EncodeOptions.InputContract contract;
    private final float[] pixelNorm;
    private final long[] pixelPatch;
    /** What a batch without images gets; null: nothing (ALLOW). */
    private final DummyImage dummy;
    /** Packed mode: the packs' layout and tokens; null: padded batches. */
    private final PackAssembler packer;
    private final java.util.Set<Allocation> unsealed = java.util.concurrent.ConcurrentHashMap.newKeySet();
    private final java.util.Set<StoredBatch> unreleased = java.util.concurrent.ConcurrentHashMap.newKeySet();
    /** Allocations asked of the store and not yet handed to the stream (made, waiting for budget, or aborted on close). */
    private final java.util.Map<CompletableFuture<Allocation>, CompletableFuture<Allocated>> allocating =
            new java.util.concurrent.ConcurrentHashMap<>();
    private volatile boolean closed;

    StoredBatchWriter(ShmObjectStore store, CpuPool cpu, FeedMetrics metrics, int world, dev.stoker.encode.EncodeOptions encode) {
        this(store, cpu, metrics, world, 0, encode);
    }

    /**
     * A writer for a feed whose ranks start at {@code firstRank} (a node serving some of the world's): rank r's
     * allocations count against the store's share {@code r - firstRank}.
     */
    StoredBatchWriter(ShmObjectStore store, CpuPool cpu, FeedMetrics metrics, int world, int firstRank,
                      dev.stoker.encode.EncodeOptions encode) {
        this(store, cpu, metrics, world, firstRank, encode, 0);
    }

    /**
     * A writer of padded batches ({@code packPadTo} 0) or, with {@code packPadTo} ≥ 1, of a packed job's packs, each row
     * padded at its tail to a multiple of {@code packPadTo} tokens (1: none; the job's {@code --pack-pad-to}).
     */
    StoredBatchWriter(ShmObjectStore store, CpuPool cpu, FeedMetrics metrics, int world, int firstRank,
                      dev.stoker.encode.EncodeOptions encode, int packPadTo) {
        if (packPadTo < 0) throw new IllegalArgumentException("packPadTo must be 0 (unpacked) or the pack's pad multiple: " + packPadTo);
        this.packer = packPadTo == 0 ? null : new PackAssembler(encode, packPadTo);
        this.store = store;
        this.firstRank = firstRank;
        this.cpu = cpu;
        this.metrics = metrics;
        this.world = world;
        this.rowLength = encode.vision().rowLength();
        this.compact = encode.pixelFormat() == dev.stoker.encode.EncodeOptions.PixelFormat.UINT8;
        this.pixelFormat = encode.pixelFormat();
        this.pixelTensor = BatchSchema.pixelTensor(pixelFormat);
        this.videoTensor = BatchSchema.videoPixelTensor(pixelFormat);
        this.contract = encode.inputContract();
        this.pixelNorm = dev.stoker.image.qwenvl.CompactPixels.norm(encode.vision());
        this.pixelPatch = dev.stoker.image.qwenvl.CompactPixels.patch(encode.vision());
        this.dummy = DummyImage.forPolicy(encode.textOnly(), encode.vision(), encode.imageBackend());
    }

    /** Plans the batch's layout from its prepared samples and allocates its object. */
    CompletableFuture<Allocated> allocate(ScheduledBatch scheduled, List<SamplePipeline.Outcome> group) {
        var ready = new ArrayList<SamplePipeline.Ready>();
        var failed = new ArrayList<SamplePipeline.Failed>();
        for (var o : group) {
            switch (o) {
                case SamplePipeline.Ready r -> ready.add(r);
                case SamplePipeline.Failed f -> failed.add(f);
                default -> throw new IllegalStateException("allocate: sample " + o.slot().datasetIndex() + " was not prepared");
            }
        }
        var samples = ready.stream().map(SamplePipeline.Ready::sample).toList();
        boolean plannedDummy = packer != null && PackAssembler.plannedDummy(scheduled);
        var plan = planOf(samples, plannedDummy);
        long bytes = plan.totalBytes();
        if (dummy != null || plannedDummy) // should every sample with images fail, the text-only ones are left, with the dummy
            bytes = Math.max(bytes, planOf(samples.stream().filter(p -> p.images().isEmpty()).toList(), plannedDummy).totalBytes());
        if (bytes > store.objectLimitBytes()) return CompletableFuture.failedFuture(pastLimit(scheduled, samples, bytes));
        var requested = store.allocate(bytes, scheduled.rank() - firstRank); // counted against the rank's share of the store
        var allocated = requested.thenApply(a -> {
            unsealed.add(a);
            if (closed) {
                abort(a);
                throw new java.util.concurrent.CancellationException("feed closed");
            }
            return new Allocated(scheduled, ready, failed, plan, a, plannedDummy);
        });
        allocating.put(requested, allocated);
        allocated.whenComplete((a, err) -> allocating.remove(requested));
        return allocated;
    }

    /**
     * The refusal of a batch larger than the store was sized for ({@link ShmObjectStore#limitObjects}: the data's largest
     * batch, from its shapes): it could wait forever on a share its rank's own leases fill, so it fails the feed at once,
     * naming the batch, its largest sample and the likely cause.
     */
    private IllegalStateException pastLimit(ScheduledBatch scheduled, List<SampleEncoder.Prepared> samples, long bytes) {
        SampleEncoder.Prepared largest = null;
        for (var p : samples)
            if (largest == null || p.pixelBytes() + p.videoBytes() > largest.pixelBytes() + largest.videoBytes()) largest = p;
        return new IllegalStateException(String.format(java.util.Locale.ROOT, "the batch of step %d for rank %d (samples %s) takes %d "
                + "bytes, more than the %d bytes shared memory was sized for (%s)%s: the data set changed since its shapes were read? "
                + "Re-run stoker validate, or give --shm-budget", scheduled.globalStep(), scheduled.rank(),
                String.join(", ", samples.stream().map(SampleEncoder.Prepared::id).toList()), bytes, store.objectLimitBytes(),
                store.objectLimitReason(), largest == null ? "" : "; sample " + largest.id() + " is its largest, "
                        + (largest.pixelBytes() + largest.videoBytes()) + " bytes of pixels"));
    }

    /** Writes every sample's pixels in parallel, then tokens and header; seals the object. */
    CompletableFuture<StoredBatch> fill(Allocated a) {
        MemorySegment seg = a.allocation().segment();
        long offset = a.plan().offset(pixelTensor);
        long videoOffset = hasVideos(a.plan()) ? a.plan().offset(videoTensor) : 0;
        var tasks = new ArrayList<CompletableFuture<SamplePipeline.Failed>>(a.ready().size());
        for (var r : a.ready()) {
            long at = offset, videoAt = videoOffset;
            tasks.add(cpu.withEncoder(encoder -> write(encoder, r, seg, at, videoAt)));
            offset += r.sample().pixelBytes();
            videoOffset += r.sample().videoBytes();
        }
        return CompletableFuture.allOf(tasks.toArray(CompletableFuture[]::new))
                .thenCompose(v -> cpu.supply(() -> {
                    long t0 = metrics.cpuStart();
                    try {
                        return finish(a, tasks.stream().map(CompletableFuture::join).toList());
                    } finally {
                        metrics.cpuEnd(t0);
                    }
                }))
                .whenComplete((b, err) -> {
                    if (err != null) abort(a.allocation());
                });
    }

    /** One sample's pixels; returns null, or the sample as failed. */
    private SamplePipeline.Failed write(SampleEncoder encoder, SamplePipeline.Ready r, MemorySegment seg, long at, long videoAt) {
        long t0 = metrics.cpuStart();
        encoder.resetTimes();
        try {
            encoder.writePixels(r.sample(), seg, at);
            if (!r.sample().videos().isEmpty()) encoder.writeVideoPixels(r.sample(), seg, videoAt);
            metrics.encodedSamples.increment();
            return null;
        } catch (SampleException e) {
            return SamplePipeline.failed(r.slot(), r.sample().id(), e, SamplePipeline.causeOf(e, r.sample().id()), metrics.encodeFailed);
        } catch (RuntimeException e) {
            return SamplePipeline.failed(r.slot(), r.sample().id(), SampleException.Stage.DECODE, e.toString(), metrics.encodeFailed);
        } catch (OutOfMemoryError e) { // an image's decode or resize names the image itself (a SampleException)
            return SamplePipeline.failed(r.slot(), r.sample().id(), SampleException.Stage.DECODE, SamplePipeline.outOfMemory(e),
                    metrics.encodeFailed);
        } finally {
            long took = System.nanoTime() - t0;
            metrics.encodeNanos.add(took);
            metrics.pixelWriteLatency.record(took);
            metrics.recordStages(encoder);
            metrics.cpuEnd(t0);
        }
    }

    private StoredBatch finish(Allocated a, List<SamplePipeline.Failed> pixelFailures) {
        long t0 = System.nanoTime();
        MemorySegment seg = a.allocation().segment();
        var kept = new ArrayList<SamplePipeline.Ready>(a.ready().size());
        var failed = new ArrayList<>(a.failed());
        for (int i = 0; i < a.ready().size(); i++) {
            if (pixelFailures.get(i) == null) kept.add(a.ready().get(i));
            else failed.add(pixelFailures.get(i));
        }
        var plan = a.plan();
        long copied = 0;
        if (kept.size() < a.ready().size()) {
            plan = planOf(kept.stream().map(SamplePipeline.Ready::sample).toList(), a.plannedDummy());
            // close the gaps: with fewer samples every tensor before the pixels is no larger, so the pixel tensor starts at or
            // before where it did and each kept sample's rows move down (in ascending order: never over rows not yet moved)
            copied += closeGaps(seg, a.ready(), kept, a.plan().offset(pixelTensor), plan.offset(pixelTensor), SampleEncoder.Prepared::pixelBytes);
            // the video rows come after the image tensors, which only shrank: the same move down, in the same order
            if (hasVideos(plan))
                copied += closeGaps(seg, a.ready(), kept, a.plan().offset(videoTensor), plan.offset(videoTensor),
                        SampleEncoder.Prepared::videoBytes);
        }
        var samples = kept.stream().map(SamplePipeline.Ready::sample).toList();
        if (packer != null) writePack(seg, plan, samples, a.plannedDummy());
        else writeTokens(seg, plan, samples);
        writeVideoGrids(seg, plan, samples);
        int[] indices = new int[kept.size()];
        long[] index = new long[sampleIndexLength(plan)];
        var ids = new ArrayList<String>(kept.size());
        for (int i = 0; i < kept.size(); i++) {
            indices[i] = kept.get(i).slot().datasetIndex();
            index[i] = indices[i];
            ids.add(kept.get(i).sample().id());
        }
        if (index.length > kept.size()) index[kept.size()] = PackAssembler.DUMMY_SAMPLE_INDEX; // a pack's dummy segment
        put(seg, plan.offset(BatchSchema.SAMPLE_INDEX), index);
        if (compact) {
            MemorySegment.copy(pixelNorm, 0, seg, FLOAT_LE, plan.offset(BatchSchema.PIXEL_NORM), pixelNorm.length);
            put(seg, plan.offset(BatchSchema.PIXEL_PATCH), pixelPatch);
        }
        var s = a.scheduled();
        BatchLayout.writeHeader(new BatchLayout.Meta(s.epoch(), s.step(), s.rank(), world, kept.size(), s.size(), s.globalStep(), s.after()),
                plan, seg);
        failed.sort(Comparator.comparingInt(f -> f.slot().position()));
        var skipped = failed.stream().map(SamplePipeline.Failed::skipped).toList();
        var object = a.allocation().seal();
        unsealed.remove(a.allocation());
        metrics.assembledBatches.increment();
        metrics.assembledBytes.add(plan.totalBytes());
        metrics.copiedBytes.add(copied);
        long took = System.nanoTime() - t0;
        metrics.assembleNanos.add(took);
        metrics.assembleLatency.record(took);
        var batch = new StoredBatch(s.epoch(), s.step(), s.globalStep(), s.rank(), s.size(), ids, indices, skipped, kept.size(),
                plan.totalBytes(), copied, object, new AtomicBoolean());
        unreleased.removeIf(x -> x.released().get());
        unreleased.add(batch);
        return batch;
    }

    /**
     * Moves each kept sample's bytes of one tensor (their sizes by {@code bytesOf}) from where the first plan put them
     * ({@code from}) down to where the smaller plan puts them ({@code to}), in ascending order, so never over bytes not yet
     * moved; returns the bytes copied.
     */
    private static long closeGaps(MemorySegment seg, List<SamplePipeline.Ready> ready, List<SamplePipeline.Ready> kept, long from,
                                  long to, java.util.function.ToLongFunction<SampleEncoder.Prepared> bytesOf) {
        long copied = 0;
        int k = 0;
        for (var r : ready) {
            long bytes = bytesOf.applyAsLong(r.sample());
            if (k < kept.size() && kept.get(k) == r) {
                if (from != to && bytes > 0) {
                    MemorySegment.copy(seg, from, seg, to, bytes);
                    copied += bytes;
                }
                to += bytes;
                k++;
            }
            from += bytes;
        }
        return copied;
    }

    /** Whether a batch of {@code plan} carries video tensors (one of its samples has a video). */
    private static boolean hasVideos(BatchLayout.Plan plan) {
        for (var spec : plan.specs()) if (spec.name().equals(BatchSchema.VIDEO_GRID_THW)) return true;
        return false;
    }

    /**
     * The kept samples' {@code video_grid_thw}, for Qwen2.5-VL {@code second_per_grid_ts}, and in the compact format
     * {@code video_frame_counts}, where the batch has videos.
     */
    private void writeVideoGrids(MemorySegment seg, BatchLayout.Plan plan, List<SampleEncoder.Prepared> samples) {
        if (!hasVideos(plan)) return;
        if (compact) {
            long counts = plan.offset(BatchSchema.VIDEO_FRAME_COUNTS);
            for (var s : samples) {
                long[] c = s.videoFrameCounts();
                put(seg, counts, c);
                counts += 8L * c.length;
            }
        }
        long grid = plan.offset(BatchSchema.VIDEO_GRID_THW);
        boolean seconds = plan.specs().stream().anyMatch(x -> x.name().equals(BatchSchema.SECOND_PER_GRID_TS));
        long secondsAt = seconds ? plan.offset(BatchSchema.SECOND_PER_GRID_TS) : 0;
        for (var s : samples) {
            long[] g = s.videoGridThw();
            put(seg, grid, g);
            grid += 8L * g.length;
            if (seconds) {
                float[] t = s.secondPerGridTs();
                MemorySegment.copy(t, 0, seg, FLOAT_LE, secondsAt, t.length);
                secondsAt += 4L * t.length;
            }
        }
    }

    /** A padded batch's token tensors, its grids and the dummy image's pixels where it gets one. */
    private void writeTokens(MemorySegment seg, BatchLayout.Plan plan, List<SampleEncoder.Prepared> samples) {
        boolean withDummy = needsDummy(samples);
        var tokens = BatchAssembler.collate(samples.stream().map(s -> new long[][] {s.text().inputIds(), s.text().labels(), s.text().positionIds()}).toList(),
                withDummy ? dummy.tokens() : null, contract.positionPad());
        put(seg, plan.offset(BatchSchema.INPUT_IDS), tokens.inputIds());
        put(seg, plan.offset(BatchSchema.LABELS), tokens.labels());
        put(seg, plan.offset(BatchSchema.ATTENTION_MASK), tokens.attentionMask());
        put(seg, plan.offset(BatchSchema.POSITION_IDS), tokens.positionIds());
        if (contract.mmTokenTypeIds()) put(seg, plan.offset(BatchSchema.MM_TOKEN_TYPE_IDS), BatchAssembler.mmTokenTypeIds(tokens.inputIds()));
        long gridOffset = plan.offset(BatchSchema.IMAGE_GRID_THW);
        for (var s : samples) {
            long[] grid = s.gridThw();
            put(seg, gridOffset, grid);
            gridOffset += 8L * grid.length;
        }
        if (withDummy) { // the batch's only image: no sample's pixels to move, the pixel tensor is the dummy's
            dummy.writePixels(pixelFormat, seg, plan.offset(pixelTensor));
            put(seg, gridOffset, dummy.gridThw());
        }
    }

    /**
     * A pack's token tensors ({@link PackAssembler#pack}), its grids, the dummy segment's pixels where it gets one (after
     * the samples' rows: it gets one only when they have none), and {@code cu_seqlens}, {@code max_seqlen}, {@code seg_ids}.
     */
    private void writePack(MemorySegment seg, BatchLayout.Plan plan, List<SampleEncoder.Prepared> samples, boolean plannedDummy) {
        int images = 0;
        long pixelBytes = 0;
        var ids = new ArrayList<String>(samples.size());
        var arrays = new ArrayList<long[][]>(samples.size());
        for (var p : samples) {
            images += p.images().size() + p.videos().size(); // what runs the vision tower: a video does, as an image
            pixelBytes += p.pixelBytes();
            ids.add(p.id());
            arrays.add(new long[][] {p.text().inputIds(), p.text().labels(), p.text().positionIds()});
        }
        boolean withDummy = packer.getsDummy(plannedDummy, samples.size(), images);
        var tokens = PackAssembler.pack(ids, arrays, withDummy ? packer.dummy().tokens() : null,
                withDummy ? packer.dummyPositionIds() : null, packer.padTo());
        put(seg, plan.offset(BatchSchema.INPUT_IDS), tokens.inputIds());
        put(seg, plan.offset(BatchSchema.LABELS), tokens.labels());
        put(seg, plan.offset(BatchSchema.POSITION_IDS), tokens.positionIds());
        if (contract.mmTokenTypeIds()) put(seg, plan.offset(BatchSchema.MM_TOKEN_TYPE_IDS), BatchAssembler.mmTokenTypeIds(tokens.inputIds()));
        long gridOffset = plan.offset(BatchSchema.IMAGE_GRID_THW);
        for (var p : samples) {
            long[] grid = p.gridThw();
            put(seg, gridOffset, grid);
            gridOffset += 8L * grid.length;
        }
        if (withDummy) {
            packer.dummy().writePixels(pixelFormat, seg, plan.offset(pixelTensor) + pixelBytes);
            put(seg, gridOffset, packer.dummy().gridThw());
        }
        int[] lengths = tokens.segmentLengths();
        putInts(seg, plan.offset(BatchSchema.CU_SEQLENS), PackAssembler.cuSeqlens(lengths));
        putInts(seg, plan.offset(BatchSchema.MAX_SEQLEN), new int[] {PackAssembler.maxSeqlen(lengths)});
        putInts(seg, plan.offset(BatchSchema.SEG_IDS), PackAssembler.segIds(lengths, tokens.length()));
    }

    /** Elements of the plan's {@code sample_index}: one per sample, and for a pack one more for its dummy segment. */
    private static int sampleIndexLength(BatchLayout.Plan plan) {
        for (var spec : plan.specs()) if (spec.name().equals(BatchSchema.SAMPLE_INDEX)) return Math.toIntExact(spec.shape()[0]);
        throw new IllegalStateException("no sample_index in the plan");
    }

    private void abort(Allocation a) {
        a.abort();
        unsealed.remove(a);
    }

    /**
     * A heap batch ({@link BatchSchema#tensors}) copied into an object of its own and sealed: how an audio family's batches
     * (issue 32) reach shared memory, since their clips' features are computed whole before the batch's size is known
     * rather than written in place. One copy of the batch's bytes, counted in {@code copiedBytes}.
     */
    CompletableFuture<StoredBatch> store(dev.stoker.encode.batch.Batch b, dev.stoker.core.VisionConfig vision) {
        var tensors = BatchSchema.tensors(b, world, vision);
        long bytes = BatchLayout.sizeOf(tensors.tensors());
        if (bytes > store.objectLimitBytes())
            return CompletableFuture.failedFuture(new IllegalStateException(String.format(java.util.Locale.ROOT,
                    "the batch of step %d for rank %d (samples %s) takes %d bytes, more than the %d bytes shared memory was sized "
                            + "for (%s): give --shm-budget", b.globalStep(), b.rank(), String.join(", ", b.sampleIds()), bytes,
                    store.objectLimitBytes(), store.objectLimitReason())));
        var requested = store.allocate(bytes, b.rank() - firstRank);
        var stored = requested.thenApply(a -> {
            unsealed.add(a);
            if (closed) {
                abort(a);
                throw new java.util.concurrent.CancellationException("feed closed");
            }
            try {
                BatchLayout.write(tensors.meta(), tensors.tensors(), a.segment());
            } catch (RuntimeException e) {
                abort(a);
                throw e;
            }
            var object = a.seal();
            unsealed.remove(a);
            metrics.copiedBytes.add(bytes);
            var batch = new StoredBatch(b.epoch(), b.step(), b.globalStep(), b.rank(), b.scheduled(), b.sampleIds(), b.datasetIndices(),
                    b.skippedSamples(), b.samples(), bytes, bytes, object, new AtomicBoolean());
            unreleased.removeIf(x -> x.released().get());
            unreleased.add(batch);
            return batch;
        });
        allocating.put(requested, stored.thenApply(x -> (Allocated) null));
        stored.whenComplete((x, err) -> allocating.remove(requested));
        return stored;
    }

    /** Aborts unsealed objects and releases the pipeline's hold on every batch not released yet. */
    @Override
    public void close() {
        closed = true;
        for (Allocation a : unsealed) abort(a);
        for (StoredBatch b : unreleased) b.release();
        unreleased.clear();
        // the store makes new segments on its own thread: wait until each request is delivered (and aborted, being
        // closed) or, when it still waits for budget someone else holds, withdraw it
        long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(Feeder.CLOSE_TIMEOUT_SECONDS);
        for (var e : allocating.entrySet()) {
            try {
                e.getValue().get(Math.max(0, deadline - System.nanoTime()), java.util.concurrent.TimeUnit.NANOSECONDS);
            } catch (java.util.concurrent.TimeoutException ex) {
                e.getKey().cancel(false);
            } catch (InterruptedException ex) {
                Thread.currentThread().interrupt();
                e.getKey().cancel(false);
            } catch (java.util.concurrent.ExecutionException | java.util.concurrent.CancellationException ex) {
                // aborted above or never allocated: nothing held
            }
        }
    }

    private static void put(MemorySegment seg, long offset, long[] values) {
        MemorySegment.copy(values, 0, seg, LONG_LE, offset, values.length);
    }

    private static void putInts(MemorySegment seg, long offset, int[] values) {
        MemorySegment.copy(values, 0, seg, INT_LE, offset, values.length);
    }

    /** Whether a batch of {@code samples} gets the dummy image: some sample, no image, and the policy says so. */
    private boolean needsDummy(List<SampleEncoder.Prepared> samples) {
        return DummyImage.needed(dummy, samples.size(), samples.stream().mapToInt(s -> s.images().size() + s.videos().size()).sum());
    }

    /** The layout of {@code samples}: a pack's in packed mode ({@code plannedDummy}: the planner's dummy flag), else {@link #plan}. */
    BatchLayout.Plan planOf(List<SampleEncoder.Prepared> samples, boolean plannedDummy) {
        if (packer == null) return plan(samples);
        int images = 0;
        long tokens = 0, rows = 0, bytes = 0;
        var videos = BatchShape.Videos.NONE;
        for (var s : samples) {
            tokens += s.length();
            rows += s.pixelRows();
            bytes += s.pixelBytes();
            images += s.images().size();
            videos = videos.plus(s.videoShape());
        }
        var shape = packer.shape(samples.size(), tokens, rows, images, compact ? bytes : 0,
                packer.getsDummy(plannedDummy, samples.size(), images + videos.count())).withVideos(videos);
        return BatchSchema.plan(shape, rowLength);
    }

    /** The layout of a batch of {@code samples}, by {@link BatchSchema}, with the dummy image where it gets one. */
    BatchLayout.Plan plan(List<SampleEncoder.Prepared> samples) {
        int b = samples.size(), len = 0, images = 0;
        long rows = 0, bytes = 0;
        for (var s : samples) {
            len = Math.max(len, s.length());
            rows += s.pixelRows();
            bytes += s.pixelBytes();
            images += s.images().size();
        }
        var videos = BatchShape.Videos.NONE;
        for (var s : samples) videos = videos.plus(s.videoShape());
        var shape = new BatchShape(b, len, rows, rowLength, images, pixelFormat, compact ? bytes : 0, contract).withVideos(videos);
        if (needsDummy(samples)) shape = dummy.addTo(shape, samples.get(0).length());
        return BatchSchema.plan(shape, rowLength);
    }
}
