package dev.stoker.cluster;

import dev.stoker.plan.schedule.StepSchedule;
import java.util.List;
import org.apache.pekko.actor.typed.ActorRef;

/** What a node's trainer-facing side asks a job's coordinator. */
public final class CoordinatorProtocol {
    private CoordinatorProtocol() {}

    /** Not sealed: the coordinator also takes local messages (membership, receptionist) that never cross nodes. */
    public interface Command extends ClusterMessage {}

    /**
     * Rank {@code rank}'s next batch; asking means the trainer holds the batch before it. {@code moves} is how many
     * times the job had moved back when the node asked ({@link Moved#moves}): an ask made before the job moved back (a
     * node pulls ahead while its trainers restart) is refused, so that it cannot take the first batch of the place the job
     * moved to.
     */
    public record NextBatch(String job, int rank, long moves, ActorRef<BatchRef> replyTo) implements Command {}

    /** The owner of rank {@code rank}'s batch {@code key} could not be read ({@code reason}): make it again elsewhere. */
    public record Refetch(String job, int rank, String key, String reason, ActorRef<BatchRef> replyTo) implements Command {}

    /**
     * Starts every rank of the job at the cursor (epoch, position): a trainer resumes from a saved
     * state. Accepted while no batch was handed out, or when the job is there already. {@code step}
     * is the label the trainer gives that step (−1: none): a job moved there counts its steps on from
     * it, so that a change of rank count repeats no label.
     */
    public record MoveTo(String job, long epoch, long position, long step, ActorRef<Moved> replyTo) implements Command {}

    /**
     * The answer to {@link MoveTo}: {@code error} is null when the job is at the cursor now, and its
     * steps are labelled from (labelEpoch, labelPosition) = {@code labelStep} on (−1: from the origin);
     * {@code moves}: how many times the job has moved back after handing out batches, which the node's later asks carry.
     */
    public record Moved(String error, long labelEpoch, long labelPosition, long labelStep, long moves) implements ClusterMessage {
        static Moved failed(String error) { return new Moved(error, 0, 0, -1, -1); }

        static Moved labelledAs(StepSchedule s, long moves) {
            var at = s.labelAt();
            return at == null ? new Moved(null, 0, 0, -1, moves) : new Moved(null, at.epoch(), at.position(), s.labelStep(), moves);
        }
    }

    /**
     * Where rank {@code rank}'s next batch is: object {@code key} on node {@code address}, served by
     * Flight at {@code flightHost:flightPort}; {@code end} when the rank's feed is over; {@code error}
     * when it cannot be made.
     */
    public record BatchRef(String key, String address, String flightHost, int flightPort, long bytes, long epoch, long position,
                           long globalStep, int rank, int samples, int scheduled, List<String> skipped, boolean end, String error)
            implements ClusterMessage {
        public static BatchRef ended(int rank) {
            return new BatchRef("", "", "", 0, 0, 0, 0, 0, rank, 0, 0, List.of(), true, null);
        }

        public static BatchRef failed(int rank, String error) {
            return new BatchRef("", "", "", 0, 0, 0, 0, 0, rank, 0, 0, List.of(), false, error);
        }
    }
}
