package dev.stoker.cluster;

import dev.stoker.node.ConfigException;
import dev.stoker.node.NodeConfig;
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

    /** Refuses a store whose shares cannot hold the batches a node with workers makes for one rank. */
    static void checkMade(NodeConfig job, long budget) { check(job, budget, 2, "made here for a rank (the one handed out and the next)"); }

    /** Refuses a store whose shares cannot hold what one of this node's trainers holds and pulls. */
    static void checkPulled(NodeConfig job, long budget) {
        check(job, budget, ShmBudget.LEASES_PER_TRAINER + 1, "pulled here for a trainer (the " + ShmBudget.LEASES_PER_TRAINER
                + " batches it may hold and the next)");
    }

    private static void check(NodeConfig job, long budget, int batches, String what) {
        long largest = job.shm().largestBatchBytes();
        if (largest < 0)
            throw new ConfigException("--max-seq-len 0 leaves a batch's size unbounded, so no --node-shm-budget can be known to suffice");
        long need = batches * ShmObjectStore.sizeClass(largest), share = share(budget, job.ranks());
        if (share < need)
            throw new ConfigException("--node-shm-budget " + budget + " gives each of the " + owners(job.ranks()) + " shares of a "
                    + job.ranks() + "-rank job " + share + " bytes, and the batches " + what + " need " + need + " (the largest batch is "
                    + largest + " bytes). Raise --node-shm-budget to " + need * owners(job.ranks()) + ", or lower --batch, --max-pixels, "
                    + "--max-seq-len or --max-images");
    }
}
