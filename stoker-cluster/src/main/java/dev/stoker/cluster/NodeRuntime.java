package dev.stoker.cluster;

import dev.stoker.core.ScheduleCursor;
import dev.stoker.core.batch.BatchProvider;
import dev.stoker.flight.FlightBatchServer;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.pipeline.feed.StoredBatch;
import dev.stoker.store.ShmObjectStore;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.pekko.actor.ClassicActorSystemProvider;
import org.apache.pekko.actor.typed.ActorRef;

/**
 * What one node holds for the jobs running on it: each job's {@link dev.stoker.pipeline.feed.TaskProducer},
 * the batches it made (kept in the node's store under their names until the coordinator releases
 * them), and the counters that show where bytes went. The node's Flight server lends these
 * objects by name ({@link #lend}); its trainer socket leases them directly when a local rank's
 * batch was made here.
 *
 * <p>Threading: every method is thread-safe; a job opens on its own thread.
 */
final class NodeRuntime implements FlightBatchServer.ObjectLender {
    private static final System.Logger LOG = System.getLogger(NodeRuntime.class.getName());

    /**
     * Workers (by their job-wide index) a job's task producer accepts on one node: a node may be given any of the job's
     * workers when another node dies, so this bounds the job's worker count, not the node's slots.
     */
    static final int MAX_WORKERS = NodeConfig.MAX_CLUSTER_WORKERS;

    private final ShmObjectStore store;
    private final int slots;
    private volatile ClassicActorSystemProvider system;
    private final Map<String, NodeJob> jobs = new ConcurrentHashMap<>();
    private final AtomicLong jobSequence = new AtomicLong();
    final AtomicLong produced = new AtomicLong();
    final AtomicLong pulledBatches = new AtomicLong();
    final AtomicLong pulledBytes = new AtomicLong();
    final AtomicLong localHandOuts = new AtomicLong();
    /** Reads and serves cache entries for the jobs' affinity ({@code --cache-affinity}); null until set. */
    private volatile CacheAffinity cacheAffinity;
    /** This node's cache folder, over the job's (a node's own {@code --cache-dir}); null: the job's. */
    private volatile java.nio.file.Path cacheDir;
    /** Passes batches of other nodes on ({@code --retrieval relay}, on the coordinator's node); null until set. */
    private volatile BatchRelay relay;

    /** One job on this node. */
    static final class NodeJob {
        final String id;
        final ActorRef<CoordinatorProtocol.Command> coordinator;
        final CompletableFuture<NodeFeeds.Tasks> opened = new CompletableFuture<>();
        final Map<String, StoredBatch> objects = new ConcurrentHashMap<>();
        /** Fails when the job ends on this node (stopped, or its coordinator lost): what its trainers' pending requests wait on too. */
        final CompletableFuture<Void> gone = new CompletableFuture<>();
        final long sequence;
        final String config; // the job's NodeConfig JSON
        volatile NodeProtocol.JobStarted started;
        /** The job's shared-memory figures as this node sized its store for it (set when it opens here); null before. */
        volatile dev.stoker.node.ShmBudget shm;
        /** The cache's affinity for this job here ({@code --cache-affinity}); null: off, or not opened yet. */
        volatile dev.stoker.cache.AffineCache affine;
        /** Whether the job's entries go through their homes ({@code --cache-affinity}); else {@link #affine} keeps them local. */
        volatile boolean affinityOn;
        /** The job's cache homes as the coordinator last sent them; null before. */
        volatile dev.stoker.cache.CacheHomes homes;
        private dev.stoker.node.RankLedger ledger; // this node's trainers' ledger, made when the first one says hello

        NodeJob(String id, ActorRef<CoordinatorProtocol.Command> coordinator, long sequence, String config) {
            this.config = config;
            this.id = id;
            this.coordinator = coordinator;
            this.sequence = sequence;
        }

        synchronized dev.stoker.node.RankLedger ledger(java.util.function.Supplier<dev.stoker.node.RankLedger> make) {
            if (gone.isDone()) throw new IllegalArgumentException("cluster job " + id + " has ended on this node: " + why());
            if (ledger == null) ledger = make.get();
            return ledger;
        }

        /** The ledger, once a trainer has said hello; else null. */
        synchronized dev.stoker.node.RankLedger ledgerIfAny() { return ledger; }

        /** Ends the job here: pending requests fail with {@code why}, the ledger's leases go. */
        void end(String why) {
            gone.completeExceptionally(new IllegalStateException(why));
            dev.stoker.node.RankLedger l;
            synchronized (this) {
                l = ledger;
            }
            if (l != null) l.close();
        }

        String why() {
            try {
                gone.getNow(null);
                return "running";
            } catch (java.util.concurrent.CompletionException e) {
                return e.getCause() != null ? e.getCause().getMessage() : e.getMessage();
            }
        }
    }

    /** Whether the store's budget was not given (--node-shm-budget), so that each job raises it to what it needs. */
    private volatile boolean growStore;

    /** Sizes the store for each job from then on ({@link ShmObjectStore#raiseBudget}): its budget was not given. */
    void growStorePerJob() { growStore = true; }

    NodeRuntime(ShmObjectStore store, int slots) {
        this.store = store;
        this.slots = slots;
    }

    /** The actor system the jobs' task producers run their streams on: the member's, the process's one. */
    void runOn(ClassicActorSystemProvider system) { this.system = system; }

    ShmObjectStore store() { return store; }

    int slots() { return slots; }

    /** The job opened last that is still open (the one a trainer socket on this node serves), or null. */
    NodeJob currentJob() {
        NodeJob last = null;
        for (var j : jobs.values())
            if (j.started != null && j.started.error() == null && !j.gone.isDone() && (last == null || j.sequence > last.sequence)) last = j;
        return last;
    }

    /**
     * The coordinator at {@code address} is gone (unreachable, left, stopped): every job it ran
     * ends here, so that its trainers get an error now rather than waiting on it, and a restarted
     * coordinator opens the job afresh.
     */
    void coordinatorLost(String address, String why) {
        for (var j : List.copyOf(jobs.values()))
            if (j.coordinator.path().address().toString().equals(address)) lost(j, "on " + address + " " + why);
    }

    /** The coordinator actor {@code ref} has stopped (its job ended, or its node went): its job ends here. */
    void coordinatorStopped(ActorRef<?> ref) {
        for (var j : List.copyOf(jobs.values())) if (j.coordinator.equals(ref)) lost(j, "stopped");
    }

    private void lost(NodeJob j, String why) {
        LOG.log(System.Logger.Level.WARNING, "job " + j.id + ": its coordinator " + why + "; ending the job on this node");
        stop(j, "cluster job " + j.id + ": its coordinator " + why + "; resume the trainers from their saved states once the job is "
                + "started again");
    }

    NodeJob job(String id) { return jobs.get(id); }

    /** Opens job {@code s} on a thread of its own and answers when it is ready (or failed). */
    void startJob(NodeProtocol.StartJob s, String address) {
        var job = new NodeJob(s.job(), s.coordinator(), jobSequence.incrementAndGet(), s.config());
        var old = jobs.putIfAbsent(s.job(), job);
        if (old != null && old.coordinator.equals(s.coordinator())) { // asked again (a coordinator's retry): answer the same
            old.opened.whenComplete((o, e) -> s.replyTo().tell(old.started));
            return;
        }
        if (old != null) { // a new coordinator of the job (the old one died, or restarted): open it afresh, never answer with the stale one
            stop(old, "cluster job " + s.job() + " was started again by another coordinator; resume the trainers from their saved states");
            if (jobs.putIfAbsent(s.job(), job) != null) { // a third start raced this one: it answers
                s.replyTo().tell(new NodeProtocol.JobStarted(address, 0, 0, 0, 0, 0, 0, 0, "job " + s.job() + " is being started twice at once"));
                return;
            }
        }
        Thread.ofPlatform().name("stoker-job-open-" + s.job()).daemon(true).start(() -> {
            try {
                var opened = open(job, s.config(), address);
                var p = opened.producer();
                var sch = p.schedule().order(); // the order the job's steps are cut from: its batches, or the packs planned over it
                job.started = new NodeProtocol.JobStarted(address, p.fingerprint(), sch.datasetSize(), sch.ranks(), sch.batchSize(),
                        sch.seed(), p.config().prefetchBatches(), planDigest(p.schedule()), null);
                job.opened.complete(opened);
            } catch (Exception | Error e) {
                LOG.log(System.Logger.Level.WARNING, "job " + s.job() + " failed to open: " + e);
                job.started = new NodeProtocol.JobStarted(address, 0, 0, 0, 0, 0, 0, 0, "node " + address + " cannot open the job: " + e);
                job.opened.completeExceptionally(e);
            }
            s.replyTo().tell(job.started);
        });
    }

    /**
     * The steps job {@code jobId} walks on this node, as its task producer planned them (batches of its order, or packs the
     * planner of {@code stoker plan} cut from it: {@code StepSchedules.of}); null when the job is not open here (yet).
     * The coordinator walks its own node's plan, so that it asks the workers for the very steps they cut.
     */
    dev.stoker.plan.schedule.StepSchedule planned(String jobId) {
        var job = jobs.get(jobId);
        if (job == null || !job.opened.isDone() || job.opened.isCompletedExceptionally()) return null;
        return job.opened.join().producer().schedule();
    }

    /**
     * A digest of what a packed {@code schedule}'s steps were planned from: the number of records and every record's shape
     * (tokens, each image's and video's patch rows), which with the order (the fingerprint: manifest, seed, budgets, balance,
     * cost model) decides every pack; 0 for a schedule of batches, whose steps the fingerprint alone decides. Two nodes whose
     * digests differ (a stale length index on one) would cut other packs from the same step.
     */
    static long planDigest(dev.stoker.plan.schedule.StepSchedule schedule) {
        if (!(schedule instanceof dev.stoker.plan.pack.PackedSchedule packed)) return 0;
        var shapes = packed.planner().shapes();
        long h = 0xcbf29ce484222325L ^ shapes.size();
        for (int r = 0; r < shapes.size(); r++) {
            var s = shapes.shape(r);
            h = mix(h, s.kind().ordinal());
            h = mix(h, s.tokens());
            for (int p : s.imagePatches()) h = mix(h, p);
            h = mix(h, -1);
            for (int p : s.videoPatches()) h = mix(h, p);
            h = mix(h, -2);
            for (int g : s.videoGroups()) h = mix(h, g);
            h = mix(h, -3);
        }
        return h == 0 ? 1 : h;
    }

    private static long mix(long h, long v) { return (h ^ v) * 0x100000001b3L; }

    /** Makes the batch {@code p} asks for and keeps it under its name; answers with its size or the error. */
    void produce(NodeProtocol.Produce p, String address) {
        var job = jobs.get(p.job());
        if (job == null) {
            p.replyTo().tell(failed(p, address, "no job " + p.job() + " on node " + address));
            return;
        }
        job.opened.thenCompose(o -> o.producer().produce(p.worker(), new ScheduleCursor(p.epoch(), p.position()), p.globalStep(), p.rank()))
                .whenComplete((b, err) -> {
                    if (closing) { // this node is going: silent, as a dead node is, so that the coordinator has it made elsewhere
                        if (b != null) b.release();
                        return;
                    }
                    if (err != null) {
                        p.replyTo().tell(failed(p, address, String.valueOf(err instanceof java.util.concurrent.CompletionException c
                                && c.getCause() != null ? c.getCause() : err)));
                        return;
                    }
                    if (!jobs.containsKey(p.job())) { // stopped meanwhile
                        b.release();
                        p.replyTo().tell(failed(p, address, "job " + p.job() + " stopped"));
                        return;
                    }
                    var previous = job.objects.put(p.key(), b);
                    if (previous != null) previous.release();
                    produced.incrementAndGet();
                    var skipped = new ArrayList<String>(b.skipped());
                    for (var s : b.skippedSamples()) skipped.add(s.sampleId() + ": " + s.stage() + ": " + s.cause());
                    p.replyTo().tell(new NodeProtocol.Produced(p.key(), address, b.sizeBytes(), b.samples(), b.scheduled(),
                            List.copyOf(skipped), null));
                });
    }

    private static NodeProtocol.Produced failed(NodeProtocol.Produce p, String address, String why) {
        return new NodeProtocol.Produced(p.key(), address, 0, 0, 0, List.of(), why);
    }

    /** Drops the node's hold on object {@code key} (leases taken from it stay valid until closed). */
    void release(String jobId, String key) {
        var job = jobs.get(jobId);
        if (job == null) return;
        var b = job.objects.remove(key);
        if (b != null) b.release();
    }

    /** Stops a job: its trainers' ledger, its producer, and every object it still holds. */
    void stopJob(String jobId) { stopJob(jobId, "cluster job " + jobId + " stopped"); }

    void stopJob(String jobId, String why) {
        var job = jobs.get(jobId);
        if (job != null) stop(job, why);
    }

    private void stop(NodeJob job, String why) {
        if (!jobs.remove(job.id, job)) return;
        String jobId = job.id;
        job.end(why);
        var affine = job.affine;
        if (affine != null) affine.close();
        job.opened.thenAccept(o -> {
            try {
                o.close();
            } catch (Exception e) {
                LOG.log(System.Logger.Level.WARNING, "closing job " + jobId + ": " + e);
            }
        });
        job.objects.values().forEach(StoredBatch::release);
        job.objects.clear();
    }

    /** Ranks of job {@code jobId} with a trainer connected to this node. */
    int trainersConnected(String jobId) {
        var job = jobs.get(jobId);
        var ledger = job == null ? null : job.ledgerIfAny();
        return ledger == null ? 0 : ledger.trainersConnected();
    }

    /** What the trainers of job {@code jobId} connected to this node reported: per rank, its running totals (none before a hello). */
    NodeProtocol.NodeTimings timings(String jobId, String address) {
        var job = jobs.get(jobId);
        var ledger = job == null ? null : job.ledgerIfAny();
        var out = new ArrayList<NodeProtocol.RankTiming>();
        if (ledger != null)
            for (var t : ledger.timings().totals())
                out.add(new NodeProtocol.RankTiming(t.rank(), t.steps(), t.waitNanos(), t.stepNanos(), t.steadyWaitNanos(),
                        t.steadyStepNanos()));
        return new NodeProtocol.NodeTimings(address, jobId, List.copyOf(out));
    }

    long heldObjects() {
        long n = 0;
        for (var j : jobs.values()) n += j.objects.size();
        return n;
    }

    /** An object lent out: the object, its batch's bytes, and the lease that keeps it (close it when done). */
    record Lent(dev.stoker.store.StoredObject object, long bytes, dev.stoker.store.Lease lease) {
        java.lang.foreign.MemorySegment view() { return object.segment().asSlice(0, bytes); }
    }

    /** A lease on object {@code key} of job {@code jobId}, or null when the node does not hold it (any more). */
    Lent lend(String jobId, String key) {
        var job = jobs.get(jobId);
        if (job == null) return null;
        var b = job.objects.get(key);
        if (b == null) return null;
        try {
            return new Lent(b.object(), b.sizeBytes(), b.object().lease());
        } catch (IllegalStateException released) {
            return null;
        }
    }

    /** The job's side on this node: its configuration as every node reads it, its pipeline writing into the node's store. */
    private NodeFeeds.Tasks open(NodeJob job, String configJson, String address) throws java.io.IOException, InterruptedException {
        var config = NodeConfig.fromJson(configJson);
        var dir = cacheDir;
        if (dir != null && config.cacheOn()) config = config.toBuilder().set(NodeConfig.CACHE_DIR, dir).build();
        var feeds = NodeFeeds.open(config, system);
        try {
            var affinity = cacheAffinity;
            var cache = config.preprocessedCache();
            // media entries through their homes once the coordinator names them (--cache-affinity); with it off the entries stay
            // local, and the AffineCache only counts the node's media hits and misses, so that the two can be compared
            if (affinity != null && cache != null) {
                var affine = new dev.stoker.cache.AffineCache(cache.store(), affinity.peers(job.id, address), CacheAffinity.OUTBOX_BYTES);
                cache.routeMedia(affine);
                synchronized (job) {
                    job.affinityOn = config.cacheAffinity();
                    job.affine = affine;
                    if (job.homes != null && job.affinityOn) affine.homes(job.homes);
                }
            }
            // the job's largest batch: the worst case where it fits the store, else its data's (length index or header scan)
            var shm = NodeShares.sized(config, feeds, store.budgetBytes(),
                    line -> LOG.log(System.Logger.Level.INFO, "job " + job.id + ": " + line));
            job.shm = shm;
            if (growStore) { // no --node-shm-budget: as much as the job needs, within half of what the store's folder has free
                long need = NodeShares.neededBytes(config, shm);
                if (need > store.budgetBytes()) store.raiseBudget(Math.min(need, usableHalf(store)));
            }
            if (slots > 0) NodeShares.checkMade(config, shm, store.budgetBytes());
            LOG.log(System.Logger.Level.INFO, "job " + job.id + ": store budget " + store.budgetBytes() + " bytes, " + shm.sizedFrom());
            if (shm.fromData()) store.limitObjects(shm.largestBatchBytes(), "the data's largest batch, " + shm.dataSource());
            store.shareAmong(NodeShares.owners(config.ranks()));
            return feeds.openTasks(store, MAX_WORKERS, slots > 0); // a member of no slots makes nothing: no cache to open
        } catch (java.io.IOException | InterruptedException | RuntimeException e) {
            var affine = job.affine;
            if (affine != null) affine.close();
            feeds.close();
            throw e;
        }
    }

    /** Half of what the store's folder has free, on top of what the store holds (as a local store's default budget is capped). */
    private static long usableHalf(ShmObjectStore store) {
        try {
            return store.budgetBytes() + java.nio.file.Files.getFileStore(store.config().directory()).getUsableSpace() / 2;
        } catch (java.io.IOException e) {
            return store.budgetBytes();
        }
    }

    /** A Flight DoGet for object "job/key": the object lent until the server has sent it. */
    @Override
    public BatchProvider.Stored lend(String name) {
        int slash = name.indexOf('/');
        var lent = slash < 0 ? null : lend(name.substring(0, slash), name.substring(slash + 1));
        if (lent == null) throw new IllegalArgumentException("no object " + name + " on this node");
        return new BatchProvider.Stored(lent.object().file(), lent.object().offset(), lent.bytes(), lent.view(), lent.lease()::close);
    }

    /** A Flight DoGet for object "job/relay~HOST:PORT~KEY" fetches it from that owner ({@link BatchRelay}); else {@link #lend}. */
    @Override
    public FlightBatchServer.Lent loan(String name) {
        int slash = name.indexOf('/');
        if (slash <= 0 || !BatchRelay.relayed(name.substring(slash + 1))) return FlightBatchServer.ObjectLender.super.loan(name);
        var r = relay;
        String job = name.substring(0, slash);
        if (r == null || !jobs.containsKey(job)) throw new IllegalArgumentException("no object " + name + " on this node");
        try {
            return r.fetch(job, name.substring(slash + 1));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("relay of " + name + " interrupted", e);
        }
    }

    void relayThrough(BatchRelay r) { relay = r; }

    /** Serves and reads the jobs' cache entries through {@code a} ({@code --cache-affinity}). */
    void cacheAffinity(CacheAffinity a) { cacheAffinity = a; }

    CacheAffinity cacheAffinity() { return cacheAffinity; }

    /** Keeps this node's cache in {@code dir} for every job, whatever folder the job's configuration names. */
    void cacheDir(java.nio.file.Path dir) { cacheDir = dir; }

    /** Job {@code jobId}'s affine cache on this node, while the job is open here with affinity on; else null (its peers' asks miss). */
    dev.stoker.cache.AffineCache affineCache(String jobId) {
        var job = jobs.get(jobId);
        return job == null || !job.affinityOn ? null : job.affine;
    }

    /** The coordinator's homes of job {@code m.job()}, as node {@code self} sees them. */
    void cacheHomes(NodeProtocol.CacheHomes m, String self) {
        var job = jobs.get(m.job());
        if (job == null) return;
        var members = new java.util.ArrayList<dev.stoker.cache.CacheHomes.Member>();
        for (var i : m.homes()) members.add(new dev.stoker.cache.CacheHomes.Member(i.address(), i.flightHost(), i.flightPort()));
        var homes = new dev.stoker.cache.CacheHomes(self, members);
        synchronized (job) {
            job.homes = homes;
            if (job.affine != null && job.affinityOn) job.affine.homes(homes);
        }
    }

    /** What the cache's affinity did on this node (with it off: the media hits and misses of the local cache), over the jobs open here with the cache on; null when none has it. */
    dev.stoker.cache.AffineCache.Stats affinityStats() {
        dev.stoker.cache.AffineCache.Stats sum = null;
        for (var j : jobs.values()) {
            var a = j.affine;
            if (a == null) continue;
            var s = a.stats();
            sum = sum == null ? s : new dev.stoker.cache.AffineCache.Stats(sum.localHits() + s.localHits(), sum.localMisses() + s.localMisses(),
                    sum.remoteHits() + s.remoteHits(), sum.remoteMisses() + s.remoteMisses(), sum.fallbacks() + s.fallbacks(),
                    sum.fetchedBytes() + s.fetchedBytes(), sum.offered() + s.offered(), sum.outboxDropped() + s.outboxDropped(),
                    sum.taken() + s.taken(), sum.takenBytes() + s.takenBytes(), sum.takeDropped() + s.takeDropped(), sum.served() + s.served(),
                    sum.servedBytes() + s.servedBytes());
        }
        return sum;
    }

    long relayedBatches() { var r = relay; return r == null ? 0 : r.batches.get(); }

    long relayedBytes() { var r = relay; return r == null ? 0 : r.bytes.get(); }

    /**
     * Whether this node is closing (its process stops: {@code stoker node} on SIGTERM). The batches it was making fail as
     * their producers close; answered, those failures would fail the steps of ranks that wait for them (a step handed out
     * is not made again), where a node that is gone has them made elsewhere. A closing node answers no more Produce.
     */
    private volatile boolean closing;

    void close() {
        closing = true;
        for (var id : List.copyOf(jobs.keySet())) stopJob(id);
        var r = relay;
        if (r != null) r.close();
        var a = cacheAffinity;
        if (a != null) a.close();
    }
}
