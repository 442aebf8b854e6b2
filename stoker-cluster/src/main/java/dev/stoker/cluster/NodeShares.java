package dev.stoker.cluster;

import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
import dev.stoker.node.NodeFeeds;
import dev.stoker.node.ShmBudget;
import dev.stoker.store.ShmObjectStore;

/**
 * How a cluster node's store is shared during a job of R ranks: 2R equal shares, one per rank for
 * the batches this node makes (owner r) and one per rank for the copies it pulls for its own
 * trainers (owner R + r). A rank then waits only on its own releases: batches made ahead for one
 * rank, or pulled ahead for another, can never take the space the current step of a rank needs,
 * which across nodes was a deadlock (audit #15). Each share must hold what its owner needs at
 * once, each batch the largest the job can make ({@link ShmBudget#largestBatchBytes}): two made
 * batches (the one handed out and the next), and a trainer's leases with the one being pulled.
 */
final class NodeShares {
    private NodeShares() {}

    static int owners(int ranks) { return 2 * ranks; }

    /** The owner of the copies pulled here for {@code rank}. */
    static int pulledOwner(int rank, int ranks) { return ranks + rank; }

    static long share(long budget, int ranks) { return budget / owners(ranks); }

    /** Refuses a store whose shares cannot hold the batches a node with workers makes for one rank (worst case). */
    static void checkMade(NodeConfig job, long budget) { checkMade(job, job.shm(), budget); }

    /** Refuses a store whose shares cannot hold the batches a node with workers makes for one rank, each of {@code shm}'s largest. */
    static void checkMade(NodeConfig job, ShmBudget shm, long budget) {
        check(job, shm, budget, 2, "made here for a rank (the one handed out and the next)");
    }

    /** Refuses a store whose shares cannot hold what one of this node's trainers holds and pulls (worst case). */
    static void checkPulled(NodeConfig job, long budget) { checkPulled(job, job.shm(), budget); }

    /** Refuses a store whose shares cannot hold what one of this node's trainers holds and pulls, each of {@code shm}'s largest. */
    static void checkPulled(NodeConfig job, ShmBudget shm, long budget) {
        check(job, shm, budget, ShmBudget.LEASES_PER_TRAINER + 1, "pulled here for a trainer (the " + ShmBudget.LEASES_PER_TRAINER
                + " batches it may hold and the next)");
    }

    /**
     * The budget a node's store needs for {@code job}: every share able to hold what its owner holds at once (the pulled
     * shares' {@link ShmBudget#LEASES_PER_TRAINER} + 1 batches, more than the made shares' 2), each batch of {@code shm}'s
     * largest; -1 when unbounded.
     */
    static long neededBytes(NodeConfig job, ShmBudget shm) {
        long largest = shm.largestBatchBytes();
        if (largest < 0) return -1;
        return Math.multiplyExact(Math.multiplyExact(ShmBudget.LEASES_PER_TRAINER + 1L, ShmObjectStore.sizeClass(largest)),
                owners(job.ranks()));
    }

    /**
     * {@code job}'s shared-memory figures for a store of {@code budget} bytes (as it is now): the configuration's worst case where it fits
     * (or the job packs), else the largest batch of its data where the shapes are known ({@link NodeFeeds#fromData}: the
     * length index, or a header scan of a small local data set).
     */
    static ShmBudget sized(NodeConfig job, NodeFeeds feeds, long budget, java.util.function.Consumer<String> say)
            throws java.io.IOException, InterruptedException {
        var worst = job.shm();
        long need = neededBytes(job, worst);
        if (job.packed() || need >= 0 && need <= budget) return worst; // fits as it is: the data cannot make it fit better
        return feeds.fromData(worst, say);
    }

    private static void check(NodeConfig job, ShmBudget shm, long budget, int batches, String what) {
        long largest = shm.largestBatchBytes();
        if (largest < 0)
            throw new ConfigException("--max-seq-len 0 leaves a batch's size unbounded, so no --node-shm-budget can be known to suffice");
        long need = batches * ShmObjectStore.sizeClass(largest), share = share(budget, job.ranks());
        if (share < need)
            throw new ConfigException("--node-shm-budget " + budget + " gives each of the " + owners(job.ranks()) + " shares of a "
                    + job.ranks() + "-rank job " + share + " bytes, and the batches " + what + " need " + need + " (the largest batch is "
                    + largest + " bytes, " + shm.sizedFrom() + "). Raise --node-shm-budget to " + need * owners(job.ranks())
                    + ", or lower --batch, --max-pixels, --max-seq-len or --max-images");
    }
}
