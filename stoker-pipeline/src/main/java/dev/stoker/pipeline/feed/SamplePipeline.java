package dev.stoker.pipeline.feed;

import dev.stoker.core.SampleException;
import dev.stoker.encode.EncodedSample;
import dev.stoker.encode.SampleEncoder;
import dev.stoker.encode.batch.Batch;
import dev.stoker.encode.batch.BatchAssembler;
import dev.stoker.encode.batch.SkippedSample;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.source.mix.FeedSource;
import dev.stoker.text.ChatSample;
import dev.stoker.text.SampleParser;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.atomic.LongAdder;
import org.apache.pekko.NotUsed;
import org.apache.pekko.stream.javadsl.Flow;

/**
 * The three per-sample functions every mode runs — fetch, encode, assemble — and the one stream
 * shape that strings them together, so that all modes produce the same batches.
 *
 * <pre>
 *  ScheduledBatch ─mapConcat─▶ Slot ×n ─mapAsync(F) fetch─▶ Fetched|Failed ─mapAsync(T) encode─▶ Encoded|Failed
 *      ─byBatch─▶ List ─mapAsync(1) assemble─▶ Batch
 * </pre>
 * SERIAL runs fetch and encode inside one mapAsync(1) instead, so one sample is in the pipeline at a time.
 * A failed sample travels on as {@link Failed} rather than being dropped, so {@code byBatch} always
 * closes a group exactly at a batch boundary (n, a batch's samples: B, or a pack's, which vary).
 *
 * <p>Threading: fetch runs on the caller (a stream thread: parse the line, issue requests) and
 * completes on the source's threads; encode and assemble run on the {@link CpuPool}.
 */
final class SamplePipeline {
    private static final System.Logger LOG = System.getLogger(SamplePipeline.class.getName());

    sealed interface Outcome permits Fetched, Encoded, Ready, Failed {
        Slot slot();
    }

    record Slot(ScheduledBatch batch, int position) {
        int datasetIndex() { return batch.indices()[position]; }
    }

    /** A sample read: its images' bytes by reference, and the videos its source carries (empty: read by reference). */
    record Fetched(Slot slot, ChatSample sample, Map<String, byte[]> images, List<dev.stoker.source.SampleRecords.EmbeddedVideo> videos)
            implements Outcome {}

    record Encoded(Slot slot, EncodedSample sample) implements Outcome {}

    /** Prepared for its pixels (ZERO_COPY): tokens built, images planned, nothing decoded. */
    record Ready(Slot slot, SampleEncoder.Prepared sample) implements Outcome {}

    /** A sample left out: an error or filtered ({@code kind}), its cause and the cause's class ({@code reason}). */
    record Failed(Slot slot, String sampleId, SampleException.Stage stage, String cause, SampleException.Kind kind, String reason)
            implements Outcome {
        SkippedSample skipped() { return new SkippedSample(sampleId, slot.datasetIndex(), stage, cause, kind, reason); }
    }

    private final dev.stoker.source.SampleRecords records;
    private final FeedSource source;
    private final CpuPool cpu;
    private final FeedMetrics metrics;
    /** Reads video records when the job encodes video ({@link dev.stoker.encode.EncodeOptions#video()}), else refuses them. */
    private final SampleParser parser;
    private final BatchAssembler assembler;
    /** Assembles the batches of a packed job: one row of whole samples per rank (docs/protocol.md, the canonical pack). */
    private final dev.stoker.encode.batch.PackAssembler packAssembler;
    private volatile java.util.function.Consumer<Outcome> observer = o -> {};
    /** An audio family's job (issue 32): its samples are encoded whole, and a zero-copy batch is copied into shared memory. */
    private final boolean audio;
    private final dev.stoker.core.VisionConfig vision;

    SamplePipeline(dev.stoker.source.SampleRecords records, FeedSource source, CpuPool cpu, FeedMetrics metrics,
                   dev.stoker.encode.EncodeOptions encode) {
        this(records, source, cpu, metrics, encode, 1);
    }

    /** A pipeline whose packed batches ({@link ScheduledBatch#pack()} set) have their row padded to a multiple of {@code packPadTo}. */
    SamplePipeline(dev.stoker.source.SampleRecords records, FeedSource source, CpuPool cpu, FeedMetrics metrics,
                   dev.stoker.encode.EncodeOptions encode, int packPadTo) {
        this.parser = encode.sampleParser(); // without video, a refusal says why the job takes none (EncodeOptions.videoRefusal)
        this.assembler = new BatchAssembler(encode);
        this.packAssembler = new dev.stoker.encode.batch.PackAssembler(encode, packPadTo);
        this.audio = encode.audio() != null;
        this.vision = encode.vision();
        this.records = records;
        this.source = source;
        this.cpu = cpu;
        this.metrics = metrics;
    }

    /** ScheduledBatch in, Batch out; {@code serial} keeps one sample in flight, else F fetches and T encodes. */
    Flow<ScheduledBatch, Batch, NotUsed> flow(boolean serial, int fetchConcurrency, int cpuThreads) {
        return flow(serial, fetchConcurrency, cpuThreads, null);
    }

    /**
     * {@link #flow(boolean, int, int)} whose fetches also take a permit of {@code gate} (null: none), so that the autotuner
     * can move how many are in flight below {@code fetchConcurrency}, the stage's width.
     */
    Flow<ScheduledBatch, Batch, NotUsed> flow(boolean serial, int fetchConcurrency, int cpuThreads, FetchGate gate) {
        var slots = Flow.<ScheduledBatch>create().mapConcat(SamplePipeline::slots);
        var encoded = serial
                ? slots.mapAsync(1, s -> observed(fetch(s).thenCompose(this::encode)))
                : slots.mapAsync(fetchConcurrency, s -> observed(gated(gate, s))).mapAsync(cpuThreads, o -> observed(encode(o)));
        return encoded.via(byBatch()).mapAsync(1, this::assemble);
    }

    /**
     * ZERO_COPY: ScheduledBatch in, StoredBatch out. Samples are prepared (tokens, resize plans) first,
     * so that the batch's exact layout is known; then the batch's object is allocated in the store and
     * each sample's pixels are decoded and transformed straight into it ({@link StoredBatchWriter}).
     * <pre>
     *  … fetch F ─▶ mapAsync(T) prepare ─▶ byBatch ─▶ mapAsync(2) allocate (waits for budget), then fill ─▶ StoredBatch
     * </pre>
     * A batch's object is allocated only when one of the {@link StoredBatchWriter#BATCHES_FILLING} fill slots is free: an
     * allocation stage of its own ran one batch ahead of the fills, holding a segment (a whole batch of shared memory,
     * 87 MB at 8 × 451,584 px float32) that no one wrote yet (issue 30's memory item). Allocations are still requested
     * in batch order, so the store serves them in that order.
     *
     * <p>An audio family's job (issue 32) is the exception: a sample's clips have as many feature frames as they decode to,
     * known only once computed, so its samples are encoded whole, collated on the heap and each batch copied once into its
     * object ({@link StoredBatchWriter#store}):
     * <pre>
     *  … fetch F ─▶ mapAsync(T) encode ─▶ byBatch ─▶ mapAsync(2) assemble, allocate (waits for budget), copy ─▶ StoredBatch
     * </pre>
     */
    Flow<ScheduledBatch, StoredBatch, NotUsed> storedFlow(int fetchConcurrency, int cpuThreads, StoredBatchWriter writer) {
        return storedFlow(fetchConcurrency, cpuThreads, writer, null);
    }

    /** {@link #storedFlow(int, int, StoredBatchWriter)} whose fetches also take a permit of {@code gate} (null: none). */
    Flow<ScheduledBatch, StoredBatch, NotUsed> storedFlow(int fetchConcurrency, int cpuThreads, StoredBatchWriter writer, FetchGate gate) {
        if (audio) // the clips' features are computed whole (their frames are known only then): encoded, collated, copied once
            return Flow.<ScheduledBatch>create().mapConcat(SamplePipeline::slots)
                    .mapAsync(fetchConcurrency, s -> observed(gated(gate, s)))
                    .mapAsync(cpuThreads, o -> observed(encode(o)))
                    .via(byBatch())
                    .mapAsync(StoredBatchWriter.BATCHES_FILLING, group -> assemble(group).thenCompose(b -> writer.store(b, vision)));
        return Flow.<ScheduledBatch>create().mapConcat(SamplePipeline::slots)
                .mapAsync(fetchConcurrency, s -> observed(gated(gate, s)))
                .mapAsync(cpuThreads, o -> observed(prepare(o)))
                .via(byBatch())
                .mapAsync(StoredBatchWriter.BATCHES_FILLING, group -> writer.allocate(checkedBatch(group), group).thenCompose(writer::fill));
    }

    /**
     * Tells {@code o} each sample's outcome as soon as it is known — failed, fetched, encoded or prepared — on the thread
     * that completed it, before the stream's order and back-pressure hold it back ({@link FeedErrors#outcome}: the early
     * judgement). It must not block.
     */
    void observe(java.util.function.Consumer<Outcome> o) { observer = o; }

    private CompletableFuture<Outcome> observed(CompletableFuture<Outcome> outcome) {
        return outcome.thenApply(o -> {
            try {
                observer.accept(o);
            } catch (RuntimeException e) { // a judgement that breaks must not fail the sample, nor the stream
                LOG.log(System.Logger.Level.WARNING, "judging sample " + o.slot().datasetIndex() + " failed: " + e, e);
            }
            return o;
        });
    }

    /** Prepares a fetched sample on the CPU pool; a failure passes through; never completes exceptionally. */
    CompletableFuture<Outcome> prepare(Outcome in) {
        return onCpu(in, (encoder, f) -> new Ready(f.slot(), encoder.prepare(f.sample(), f.images(), videoSource(f))));
    }

    /**
     * Outcomes in stream order in, each scheduled batch's outcomes out as one list: a batch is complete when it holds as
     * many as its scheduled batch has slots (the batches of a packed job differ in size; {@code checkedBatch} checks the
     * group is that batch's slots in order).
     */
    static Flow<Outcome, List<Outcome>, NotUsed> byBatch() {
        return Flow.<Outcome>create().statefulMapConcat(() -> {
            var pending = new ArrayList<Outcome>();
            return o -> {
                pending.add(o);
                if (pending.size() < o.slot().batch().size()) return List.of();
                var group = List.copyOf(pending);
                pending.clear();
                return List.of(group);
            };
        });
    }

    private static List<Slot> slots(ScheduledBatch b) {
        if (b.size() == 0) // it would never complete a group: the rank's feed would wait for it forever
            throw new IllegalStateException("step " + b.globalStep() + " gives rank " + b.rank() + " no sample");
        var out = new ArrayList<Slot>(b.size());
        for (int i = 0; i < b.size(); i++) out.add(new Slot(b, i));
        return out;
    }

    /** {@link #fetch(Slot)} once {@code gate} gives a permit, given back when the fetch ends (null gate: at once). */
    private CompletableFuture<Outcome> gated(FetchGate gate, Slot slot) {
        if (gate == null) return fetch(slot);
        return gate.acquire().thenCompose(v -> {
            CompletableFuture<Outcome> f;
            try {
                f = fetch(slot);
            } catch (RuntimeException | Error e) {
                gate.release();
                throw e;
            }
            return f.whenComplete((o, err) -> gate.release());
        });
    }

    /** Reads the slot's record, parses it and fetches all of its images concurrently; never completes exceptionally. */
    CompletableFuture<Outcome> fetch(Slot slot) {
        metrics.fetchStarted.increment();
        int index = slot.datasetIndex();
        String recordId = records.id(index);
        CompletableFuture<dev.stoker.source.SampleRecords.Record> read;
        try {
            read = records.record(index);
        } catch (RuntimeException e) {
            read = CompletableFuture.failedFuture(e);
        }
        return read.<CompletableFuture<Outcome>>handle((bytes, err) -> {
            if (err == null) return fetch(slot, recordId, bytes);
            Throwable cause = unwrap(err);
            return CompletableFuture.<Outcome>completedFuture(cause instanceof SampleException se
                    ? failed(slot, recordId, se, se.getMessage(), metrics.fetchFailed)
                    : failed(slot, recordId, SampleException.Stage.MANIFEST, "cannot read the record: " + cause, metrics.fetchFailed));
        }).thenCompose(f -> f);
    }

    /** Parses the record read for the slot and fetches its images. */
    private CompletableFuture<Outcome> fetch(Slot slot, String recordId, dev.stoker.source.SampleRecords.Record record) {
        ChatSample sample;
        var embedded = record.images();
        try {
            if (!record.carriesMedia()) {
                sample = parser.parseLine(record.json(), recordId);
            } else { // the source carries them: the parser places them, and refuses videos (and audio) when the job takes none
                sample = parser.parseRecord(record.json(), recordId, record.imageNames(), record.videoNames(), record.audioNames());
            }
        } catch (SampleException e) {
            // the record's id when it is JSON with one (a field was wrong), else the manifest's line or position
            String id = e.sampleId() != null ? e.sampleId() : recordId;
            return CompletableFuture.completedFuture(failed(slot, id, e, e.getMessage(), metrics.fetchFailed));
        } catch (RuntimeException e) {
            return CompletableFuture.completedFuture(failed(slot, recordId, SampleException.Stage.MANIFEST, e.toString(), metrics.fetchFailed));
        }
        long startNanos = System.nanoTime();
        List<String> imageRefs = sample.imagePaths();
        // the frames of frame-list videos are images too: fetched here, concurrently, like the sample's images
        List<String> refs = new ArrayList<>(imageRefs);
        refs.addAll(SampleEncoder.frameReferences(sample));
        // an audio family's clips (issue 32) are fetched as the images are: the encoder reads them from the same map
        for (String clip : dev.stoker.encode.audio.OmniEncoder.audioReferences(sample)) if (!refs.contains(clip)) refs.add(clip);
        var futures = new ArrayList<CompletableFuture<byte[]>>(refs.size());
        for (int k = 0; k < refs.size(); k++) {
            if (!embedded.isEmpty() && k < imageRefs.size()) { // the source carried them: in the record's order, as the parser placed them
                futures.add(CompletableFuture.completedFuture(embedded.get(k).bytes()));
                continue;
            }
            String ref = refs.get(k);
            try {
                futures.add(source.fetch(slot.datasetIndex(), sample.id(), ref));
            } catch (RuntimeException e) {
                futures.add(CompletableFuture.failedFuture(e));
            }
        }
        return CompletableFuture.allOf(futures.toArray(CompletableFuture[]::new)).handle((ignored, err) -> {
            if (err != null) {
                Throwable cause = unwrap(err);
                return cause instanceof SampleException se
                        ? failed(slot, sample.id(), se, causeOf(se, sample.id()), metrics.fetchFailed)
                        : failed(slot, sample.id(), SampleException.Stage.FETCH, String.valueOf(cause), metrics.fetchFailed);
            }
            var images = new HashMap<String, byte[]>(refs.size() * 2);
            long bytes = 0;
            for (int i = 0; i < refs.size(); i++) {
                byte[] b = futures.get(i).join();
                images.put(refs.get(i), b);
                bytes += b.length;
            }
            metrics.fetchedSamples.increment();
            metrics.fetchedBytes.add(bytes);
            long took = System.nanoTime() - startNanos;
            metrics.fetchNanos.add(took);
            metrics.fetchLatency.record(took);
            return new Fetched(slot, sample, images, record.videos());
        });
    }

    /**
     * Where a fetched sample reads its videos, on the CPU thread that demuxes them: those its record carries (a tar's
     * members, read in ranges of the shard; a Parquet cell), else its record's source by reference, in ranges.
     */
    private dev.stoker.encode.video.VideoPreprocessor.VideoSource videoSource(Fetched f) {
        int record = f.slot().datasetIndex();
        return dev.stoker.encode.video.EmbeddedVideos.over(f.videos(), (id, ref) -> source.openVideo(record, id, ref));
    }

    /** Encodes a fetched sample on the CPU pool; a failure passes through; never completes exceptionally. */
    CompletableFuture<Outcome> encode(Outcome in) {
        return onCpu(in, (encoder, f) -> {
            var s = encoder.encode(f.sample(), f.images(), videoSource(f));
            metrics.encodedSamples.increment();
            return new Encoded(f.slot(), s);
        });
    }

    /** Runs {@code work} on a fetched sample with a CPU-pool thread's encoder, timing it; failures become {@link Failed}. */
    private CompletableFuture<Outcome> onCpu(Outcome in, java.util.function.BiFunction<SampleEncoder, Fetched, Outcome> work) {
        if (!(in instanceof Fetched f)) return CompletableFuture.completedFuture(in);
        metrics.encodeStarted.increment();
        return cpu.withEncoder(encoder -> {
            long t0 = metrics.cpuStart();
            encoder.resetTimes();
            try {
                return work.apply(encoder, f);
            } catch (SampleException e) {
                return failed(f.slot(), f.sample().id(), e, causeOf(e, f.sample().id()), metrics.encodeFailed);
            } catch (RuntimeException e) {
                return failed(f.slot(), f.sample().id(), SampleException.Stage.DECODE, e.toString(), metrics.encodeFailed);
            } catch (OutOfMemoryError e) { // the decoders name the image; this is the rest of the sample's work (tokens)
                return failed(f.slot(), f.sample().id(), SampleException.Stage.DECODE, outOfMemory(e), metrics.encodeFailed);
            } finally {
                long took = System.nanoTime() - t0;
                metrics.encodeNanos.add(took);
                metrics.encodeLatency.record(took);
                metrics.recordStages(encoder);
                metrics.cpuEnd(t0);
            }
        });
    }

    /** Collates one scheduled batch's outcomes on the CPU pool; failed samples ride along as {@link SkippedSample}s. */
    CompletableFuture<Batch> assemble(List<Outcome> group) {
        var scheduled = checkedBatch(group);
        return cpu.supply(() -> {
            long t0 = metrics.cpuStart();
            try {
                return assembleOnCpu(scheduled, group, t0);
            } finally {
                metrics.cpuEnd(t0);
            }
        });
    }

    private Batch assembleOnCpu(ScheduledBatch scheduled, List<Outcome> group, long t0) {
        {
            var samples = new ArrayList<EncodedSample>(group.size());
            var skipped = new ArrayList<SkippedSample>();
            var indices = new int[group.size()];
            for (var o : group) {
                switch (o) {
                    case Encoded e -> {
                        indices[samples.size()] = e.slot().datasetIndex();
                        samples.add(e.sample());
                    }
                    case Failed x -> skipped.add(x.skipped());
                    case Fetched f -> throw new IllegalStateException("assemble: sample " + f.sample().id() + " was not encoded");
                    case Ready r -> throw new IllegalStateException("assemble: sample " + r.sample().id() + " was only prepared");
                }
            }
            int[] kept = Arrays.copyOf(indices, samples.size());
            Batch b = scheduled.pack() != null ? packAssembler.assemble(scheduled, kept, samples, skipped)
                    : assembler.assemble(scheduled, kept, samples, skipped);
            metrics.assembledBatches.increment();
            metrics.assembledBytes.add(b.sizeBytes());
            metrics.copiedBytes.add(b.sizeBytes());
            long took = System.nanoTime() - t0;
            metrics.assembleNanos.add(took);
            metrics.assembleLatency.record(took);
            return b;
        }
    }

    /** The scheduled batch a group of outcomes belongs to, checking that it is exactly that batch's slots in order. */
    static ScheduledBatch checkedBatch(List<Outcome> group) {
        var scheduled = group.getFirst().slot().batch();
        if (group.size() != scheduled.size())
            throw new IllegalStateException("assemble: got " + group.size() + " samples for a batch of " + scheduled.size());
        for (int i = 0; i < group.size(); i++) {
            var slot = group.get(i).slot();
            if (slot.batch() != scheduled || slot.position() != i)
                throw new IllegalStateException("assemble: sample " + i + " of step " + scheduled.globalStep() + " rank "
                        + scheduled.rank() + " is slot " + slot.position() + " of step " + slot.batch().globalStep());
        }
        return scheduled;
    }

    /** A sample failed by something other than a {@link SampleException}: an error, classed by {@code cause}. */
    static Failed failed(Slot slot, String id, SampleException.Stage stage, String cause, LongAdder counter) {
        counter.increment();
        return new Failed(slot, id, stage, cause, SampleException.Kind.ERROR, SampleException.reasonOf(cause));
    }

    /** A sample {@code e} refused, of its stage, kind and reason, with {@code cause} as its one line. */
    static Failed failed(Slot slot, String id, SampleException e, String cause, LongAdder counter) {
        counter.increment();
        return new Failed(slot, id, e.stage(), cause, e.kind(), e.reason());
    }

    /**
     * The cause of a sample whose work ran out of heap. What failed to allocate was this sample's, and is garbage once
     * its task returns, so the CPU thread goes on with the next sample: the sample is an error, not the rank's stream
     * (audit #10).
     */
    static String outOfMemory(OutOfMemoryError e) {
        LOG.log(System.Logger.Level.WARNING, "a sample's work ran out of memory (the sample is skipped as an error): " + e);
        return "out of memory: " + e.getMessage();
    }

    /** The message, prefixed with what the exception names when that is more than the sample (an image). */
    static String causeOf(SampleException e, String sampleId) {
        return e.sampleId() == null || e.sampleId().equals(sampleId) ? e.getMessage() : e.sampleId() + ": " + e.getMessage();
    }

    private static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException) && t.getCause() != null) t = t.getCause();
        return t;
    }
}
