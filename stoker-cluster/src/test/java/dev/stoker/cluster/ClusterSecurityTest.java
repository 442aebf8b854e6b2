package dev.stoker.cluster;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.typesafe.config.ConfigValueFactory;
import dev.stoker.core.ProcessorPreset;
import dev.stoker.flight.FlightBatchClient;
import dev.stoker.node.NodeConfig;
import dev.stoker.store.ShmObjectStore;
import dev.stoker.store.StoreConfig;
import dev.stoker.testkit.DemoDatasetBuilder;
import dev.stoker.testkit.Vectors;
import dev.stoker.transport.FeedServer;
import dev.stoker.transport.TrainerClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.receptionist.Receptionist;
import org.apache.pekko.cluster.MemberStatus;
import org.apache.pekko.cluster.typed.Cluster;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The cluster against members without its key (audit #8), with real actor systems on 127.0.0.1: two nodes sharing a
 * cluster key run a job end to end (Artery over TLS with mutual authentication, batches pulled across nodes over Flight
 * TLS); a rogue with plain TCP and a rogue with TLS but another self-signed key try to join the seed throughout: neither
 * becomes a member, neither gets a Hello or StartJob, and every sample of the epoch reaches the trainers exactly once.
 * A Flight client without TLS, or with TLS but without the token, is refused by a node.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS)
@Tag("slow")
class ClusterSecurityTest {
    static final int SAMPLES = 8, RANKS = 2, BATCH = 2;
    @TempDir Path tmp;

    private record Member(ShmObjectStore store, ClusterNode node) implements AutoCloseable {
        @Override
        public void close() {
            try {
                node.close();
            } finally {
                store.close();
            }
        }
    }

    private Member member(String name, int port, String seed, ClusterKey key) throws Exception {
        var store = ShmObjectStore.open(new StoreConfig(Files.createDirectories(tmp.resolve("shm-" + name)), 256L << 20, "sec_" + name));
        try {
            var options = ClusterNode.Options.of("127.0.0.1", port, List.of(seed), 1).withTimings(Duration.ofSeconds(5), Duration.ofSeconds(15))
                    .withClusterKey(key);
            return new Member(store, ClusterNode.start(options, store));
        } catch (Exception | Error e) {
            store.close();
            throw e;
        }
    }

    /**
     * A would-be member that registers as a node under {@link NodeProtocol#KEY} and counts what it is sent; over
     * {@code transport} with the TLS files of {@code key} (another cluster's).
     */
    static ActorSystem<NodeProtocol.Command> rogue(String seed, String transport, ClusterKey.TlsFiles key, AtomicInteger got) {
        var config = ClusterNode.config(ClusterNode.Options.of("127.0.0.1", 0, List.of(seed), 1), key, false)
                .withValue("pekko.remote.artery.transport", ConfigValueFactory.fromAnyRef(transport));
        return ActorSystem.create(Behaviors.setup(ctx -> {
            ctx.getSystem().receptionist().tell(Receptionist.register(NodeProtocol.KEY, ctx.getSelf()));
            return Behaviors.receiveMessage(m -> {
                got.incrementAndGet();
                return Behaviors.same();
            });
        }), ClusterNode.SYSTEM_NAME, config);
    }

    @Test
    void membersWithoutTheKeyCannotJoinAndTheJobLosesNothing() throws Exception {
        Path manifest = new DemoDatasetBuilder().build(Vectors.projectDir().resolve("assets/photos"), tmp.resolve("ds"), SAMPLES, 3);
        var key = ClusterKey.create(tmp.resolve("cluster.key"));
        var stranger = ClusterKey.create(tmp.resolve("stranger.key"));
        int seedPort = TensorOrderTest.freePort();
        String seed = "127.0.0.1:" + seedPort;
        var rogueGot = new AtomicInteger();
        var config = NodeConfig.builder().data(manifest.toString()).ranks(RANKS).batch(BATCH).processor(ProcessorPreset.QWEN2_VL)
                .pixels(3136, 50176).threads(1).warmUpMillis(0).set(NodeConfig.MAX_IMAGES, 1).build();
        var closing = new ArrayList<AutoCloseable>();
        try {
            var a = member("a", seedPort, seed, key);
            closing.add(a);
            assertTrue(a.node().awaitUp(Duration.ofSeconds(60)), "the seed is up");
            var strangerTls = stranger.materialize();
            closing.add(strangerTls);
            var plain = rogue(seed, "tcp", strangerTls, rogueGot);
            closing.add(() -> plain.terminate());
            var otherKey = rogue(seed, "tls-tcp", strangerTls, rogueGot);
            closing.add(() -> otherKey.terminate());
            var b = member("b", 0, seed, key);
            closing.add(b);
            assertTrue(b.node().awaitUp(Duration.ofSeconds(60)), "the member with the key joins");

            var job = a.node().runJob(new ClusterJob.Spec("j", config.toJson(), 2, Placement.SPREAD, 2, SAMPLES / (RANKS * BATCH), 2),
                    Duration.ofSeconds(90));
            closing.add(job);
            assertEquals(2, job.workerNodes().stream().distinct().count(), "spread over the two members " + job.workerNodes());
            var seen = new ArrayList<Long>();
            var feeds = List.of(a.node().trainerFeed(Duration.ofSeconds(30)), b.node().trainerFeed(Duration.ofSeconds(30)));
            for (int r = 0; r < RANKS; r++) {
                try (var server = new FeedServer(tmp.resolve("r" + r + ".sock"), feeds.get(r), false);
                     var c = TrainerClient.connect(server.socketPath(), r, RANKS, "j", TrainerClient.Options.SHARED_MEMORY)) {
                    for (int s = 0; s < SAMPLES / (RANKS * BATCH); s++)
                        try (var got = c.next()) {
                            for (long i : got.batch().sampleIndex()) seen.add(i);
                        }
                }
            }
            seen.sort(null);
            assertEquals(java.util.stream.LongStream.range(0, SAMPLES).boxed().toList(), seen, "every sample exactly once");
            long pulled = a.node().stats().pulledBatches() + b.node().stats().pulledBatches();
            assertTrue(pulled > 0, "some batches crossed nodes over Flight TLS " + a.node().stats() + " " + b.node().stats());

            // the rogues tried all along (Pekko retries joining every few seconds): not members, sent nothing
            assertEquals(java.util.Set.of(a.node().address(), b.node().address()), a.node().members().keySet(), "members " + a.node().members());
            assertNotEquals(MemberStatus.up(), Cluster.get(plain).selfMember().status(), "the plain-TCP rogue is not up");
            assertNotEquals(MemberStatus.up(), Cluster.get(otherKey).selfMember().status(), "the rogue with another key is not up");
            assertEquals(0, rogueGot.get(), "the rogues got no Hello or StartJob");

            // the node's Flight endpoint: not in plaintext, and not to a TLS client without the token
            int port = a.node().flightPort();
            try (var plainFlight = FlightBatchClient.connect("127.0.0.1", port, FlightBatchClient.Options.PLAINTEXT, null)) {
                assertThrows(FlightRuntimeException.class, () -> plainFlight.next(0, 1, "j/none"));
            }
            try (var tlsNoToken = FlightBatchClient.connect("127.0.0.1", port,
                    new FlightBatchClient.Options(null, true, a.node().flightClientOptions().trustedCertificates(), ClusterKey.NAME), null)) {
                var e = assertThrows(FlightRuntimeException.class, () -> tlsNoToken.next(0, 1, "j/none"));
                assertEquals(org.apache.arrow.flight.FlightStatusCode.UNAUTHENTICATED, e.status().code(), e.getMessage());
            }
        } finally {
            for (var c : closing.reversed()) c.close();
        }
    }
}
