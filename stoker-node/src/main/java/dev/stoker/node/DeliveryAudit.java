package dev.stoker.node;

import dev.stoker.core.batch.BatchLayout;
import dev.stoker.plan.schedule.ScheduledBatch;
import dev.stoker.plan.schedule.StepSchedule;
import java.util.Arrays;
import java.util.HashMap;

/**
 * The ledger's audit (audit #13): every batch a stream makes is checked against its rank's share of the step it was
 * made for before anyone gets it — its rank, epoch, step and label are the share's, delivered + skipped = the samples
 * the share holds, and each sample it delivers is one of the share's (as often as the share holds it) — and each rank's
 * epoch, when the rank enters the next one, against the steps it took of it: one after another from where the audit
 * began the epoch, up to the epoch's last, delivered + skipped adding up to the samples of those shares. The schedule
 * says what a share is (a batch of B samples, or a pack whose size varies by step and rank); the audit asks nothing
 * else of it.
 *
 * <p>A violation is thrown as an IllegalStateException whose message starts {@code delivery accounting broken:}; the
 * ledger fails the job with it.
 *
 * <p>Threading: not thread-safe; the ledger calls it under its lock.
 */
final class DeliveryAudit {
    /** One rank's tally of the epoch it is in, from the step the audit began it at. */
    record Tally(long epoch, long delivered, long skipped) { }

    private static final class EpochAccount {
        final long epoch, firstStep;
        long steps, delivered, skipped;
        long planned;          // samples the schedule gave the rank in those steps
        boolean reachedEnd;    // the last step tallied is its epoch's last

        EpochAccount(long epoch, long firstStep) {
            this.epoch = epoch;
            this.firstStep = firstStep;
        }
    }

    private final EpochAccount[] accounts;
    private StepSchedule schedule;
    private long epochsChecked;

    /** An audit of {@code ranks} ranks' batches against {@code schedule}'s steps. */
    DeliveryAudit(int ranks, StepSchedule schedule) {
        this.accounts = new EpochAccount[ranks];
        this.schedule = schedule;
    }

    /** The stream moved (a trainer's resume): its batches follow {@code now}, and every rank's epoch is begun afresh. */
    void moved(StepSchedule now) {
        schedule = now;
        Arrays.fill(accounts, null);
    }

    /**
     * Checks a batch made for {@code share} (one rank's share of a step), of metadata {@code meta} and sample indices
     * {@code sampleIndices}, then adds it to its rank's tally of the epoch, closing the epoch before when the batch
     * begins another.
     *
     * @throws IllegalStateException when the batch or the epoch it closes breaks the accounting
     */
    void check(ScheduledBatch share, BatchLayout.Meta meta, long[] sampleIndices) {
        int rank = share.rank();
        String where = "rank " + rank + " epoch " + share.epoch() + " step " + share.step() + " (global step " + share.globalStep() + ")";
        if (meta.rank() != rank || meta.epoch() != share.epoch() || meta.step() != share.step() || meta.globalStep() != share.globalStep())
            fail(where + ": the batch made is rank " + meta.rank() + " epoch " + meta.epoch() + " step " + meta.step() + " global step "
                    + meta.globalStep());
        int planned = share.size();
        if (meta.batchSize() > meta.scheduled() || meta.scheduled() != planned)
            fail(where + ": " + meta.batchSize() + " delivered of " + meta.scheduled() + " scheduled, " + schedule.name()
                    + " gives this rank's " + schedule.unit() + " " + planned + " samples");
        var expected = new HashMap<Long, Integer>(); // a multiset: a source of weight > 1 may repeat a record in a step
        for (int i : share.indices()) expected.merge((long) i, 1, Integer::sum);
        boolean pack = share.pack() != null;
        for (long i : sampleIndices) {
            // a pack's dummy-image segment is no record: its sample_index is −1 (PackAssembler.DUMMY_SAMPLE_INDEX), once, last
            if (pack && i == dev.stoker.encode.batch.PackAssembler.DUMMY_SAMPLE_INDEX && i == sampleIndices[sampleIndices.length - 1]) continue;
            if (expected.merge(i, -1, Integer::sum) < 0)
                fail(where + ": sample " + i + " is not one of this " + schedule.unit() + "'s, or comes more often");
        }
        tally(share, meta, where);
    }

    /** Adds a checked batch to its rank's tally of the epoch, closing the epoch before when the batch begins another. */
    private void tally(ScheduledBatch share, BatchLayout.Meta meta, String where) {
        int rank = share.rank();
        var a = accounts[rank];
        if (a == null || a.epoch != share.epoch()) {
            if (a != null) closeEpoch(rank, a);
            a = accounts[rank] = new EpochAccount(share.epoch(), share.step());
        }
        if (share.step() != a.firstStep + a.steps) fail(where + ": expected step " + (a.firstStep + a.steps) + " of the epoch");
        a.steps++;
        a.delivered += meta.batchSize();
        a.skipped += meta.scheduled() - meta.batchSize();
        a.planned += share.size();
        a.reachedEnd = share.lastOfEpoch();
    }

    /** The epoch {@code a} is over for the rank: its steps ran to the epoch's last, and its samples add up. */
    private void closeEpoch(int rank, EpochAccount a) {
        if (!a.reachedEnd || a.delivered + a.skipped != a.planned)
            fail("rank " + rank + " epoch " + a.epoch + ": " + a.delivered + " delivered + " + a.skipped + " skipped in " + a.steps
                    + " steps from step " + a.firstStep + ", but " + schedule.name() + " has " + a.planned + " samples in this rank's "
                    + "shares of those steps" + (a.reachedEnd ? "" : ", and the epoch did not end with the last of them"));
        epochsChecked++;
    }

    private static void fail(String why) {
        throw new IllegalStateException("delivery accounting broken: " + why);
    }

    /** Epoch ends checked, over all ranks. */
    long epochsChecked() { return epochsChecked; }

    /** Rank {@code rank}'s tally of the epoch it is in; null before its first batch (or since a move). */
    Tally tally(int rank) {
        var a = accounts[rank];
        return a == null ? null : new Tally(a.epoch, a.delivered, a.skipped);
    }
}
