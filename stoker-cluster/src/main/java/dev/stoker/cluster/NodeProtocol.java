package dev.stoker.cluster;

import java.util.List;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.receptionist.ServiceKey;

/** What a job's coordinator says to each node's agent, and what the agent answers. */
public final class NodeProtocol {
    /** Every node's agent registers under this key; the coordinator finds the nodes through it. */
    public static final ServiceKey<Command> KEY = ServiceKey.create(Command.class, "stoker-node");

    private NodeProtocol() {}

    public sealed interface Command extends ClusterMessage permits Hello, StartJob, Produce, Release, StopJob, GetStats, MemberGone, CountTrainers,
            GetTimings, CoordinatorCheck, CacheHomes {}

    /**
     * A node's own message to its agent (never sent between nodes): member {@code address} became unreachable ({@code why}
     * "is unreachable"), reachable again (null) or left.
     */
    record MemberGone(String address, String why) implements Command {}

    /**
     * A node's own timer to its agent: member {@code address} became unreachable (its {@code episode}-th time) a down time
     * ago; if it is still unreachable, its jobs end here.
     */
    record CoordinatorCheck(String address, long episode) implements Command {}

    /** Asks a node what it is: its address, its Flight endpoint and how many workers it takes. */
    public record Hello(ActorRef<NodeInfo> replyTo) implements Command {}

    /**
     * Opens job {@code job} on the node: its configuration {@code config} (NodeConfig JSON, the same on every node), the
     * coordinator to ask for batches, and the serve-side figures the node's trainer socket needs.
     */
    public record StartJob(String job, String config, ActorRef<CoordinatorProtocol.Command> coordinator,
                           ActorRef<JobStarted> replyTo) implements Command {}

    /**
     * Make rank {@code rank}'s batch of the global step at (epoch, position), labelled {@code globalStep}, with worker
     * {@code worker}; name it {@code key}.
     */
    public record Produce(String job, String key, int worker, long epoch, long position, long globalStep, int rank,
                          ActorRef<Produced> replyTo)
            implements Command {}

    /**
     * The cache's homes of job {@code job} from now on: the live nodes that make its samples ({@code --cache-affinity};
     * docs/cluster.md). Sent by the coordinator to every live node when the job opens and whenever a node is admitted or
     * given up on; every node then computes the same home for each entry.
     */
    public record CacheHomes(String job, List<NodeInfo> homes) implements Command {}

    /** The coordinator's hold on object {@code key} ends (its rank has moved on); leases taken from it stay valid. */
    public record Release(String job, String key) implements Command {}

    public record StopJob(String job) implements Command {}

    public record GetStats(ActorRef<NodeStats> replyTo) implements Command {}

    /** How many of job {@code job}'s ranks have a trainer connected to this node now (a move back needs none anywhere). */
    public record CountTrainers(String job, ActorRef<TrainerCount> replyTo) implements Command {}

    public record TrainerCount(String address, int connected) implements ClusterMessage {}

    /**
     * Asks a node what the trainers connected to it reported for job {@code job} (docs/protocol.md, NEXT): their running
     * totals per rank, so that the coordinator's metrics, status and verdict hold every rank's wait, remote ones too.
     */
    public record GetTimings(String job, ActorRef<NodeTimings> replyTo) implements Command {}

    /**
     * What node {@code address}'s trainers reported for job {@code job}: one entry per rank a trainer of the job has
     * reported to this node (at most the job's world), each with its running totals, which only grow. The coordinator
     * checks it ({@link ClusterTimings#offer}): a node reports only the ranks it asked batches for.
     */
    public record NodeTimings(String address, String job, List<RankTiming> ranks) implements ClusterMessage {}

    /**
     * One rank's running totals on one node: steps reported, their wait and compute in ns, and the same after the rank's
     * first {@code TrainerTimings.STEADY_SKIP_STEPS} steps (the steady state).
     */
    public record RankTiming(int rank, long steps, long waitNanos, long stepNanos, long steadyWaitNanos, long steadyStepNanos)
            implements ClusterMessage {}

    /** A node: its cluster address, its Flight endpoint (host, port), the workers it takes (slots). */
    public record NodeInfo(String address, String flightHost, int flightPort, int slots) implements ClusterMessage {}

    /**
     * A job opened on a node: its schedule's shape and fingerprint, or {@code error}. {@code planDigest}: of the shapes a
     * packed job's steps were planned from on this node ({@link NodeRuntime#planDigest}; 0: batches, no shapes), so that the
     * coordinator refuses nodes that would cut other packs from the same order.
     */
    public record JobStarted(String address, long fingerprint, int datasetSize, int ranks, int batchSize, long seed,
                             int prefetchBatches, long planDigest, String error) implements ClusterMessage {}

    /**
     * A batch made ({@code error} null) and kept in the node's store under {@code key}: its size,
     * samples delivered and scheduled, and the skipped samples ("id: stage: cause").
     */
    public record Produced(String key, String address, long bytes, int samples, int scheduled, List<String> skipped, String error)
            implements ClusterMessage {}

    /**
     * A node's counters: batches made, batch bytes sent over Flight and pulled over Flight,
     * batches handed to local trainers by shared memory, objects held now, and the batches (and their bytes) it passed on
     * from other nodes ({@code --retrieval relay}: the coordinator's node); what the cache's affinity did on it over the jobs
     * open there ({@code --cache-affinity}: media entries read locally and from their homes, fallbacks, bytes fetched from
     * peers; with it off, the local media hits and misses alone; null where no job here has the cache on).
     */
    public record NodeStats(String address, long produced, long flightBatchesSent, long flightBytesSent, long pulledBatches,
                            long pulledBytes, long localHandOuts, long heldObjects, long relayedBatches, long relayedBytes,
                            dev.stoker.cache.AffineCache.Stats cacheAffinity)
            implements ClusterMessage {
        public NodeStats(String address, long produced, long flightBatchesSent, long flightBytesSent, long pulledBatches, long pulledBytes,
                         long localHandOuts, long heldObjects, long relayedBatches, long relayedBytes) {
            this(address, produced, flightBatchesSent, flightBytesSent, pulledBatches, pulledBytes, localHandOuts, heldObjects, relayedBatches,
                    relayedBytes, null);
        }
    }
}
