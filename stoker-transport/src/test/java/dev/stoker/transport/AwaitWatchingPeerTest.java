package dev.stoker.transport;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.EOFException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The server's wait for a trainer's batch while it watches the trainer's socket ({@link FeedProtocol.FrameReader#awaitWatchingPeer}):
 * the batch made ends the wait at once, whatever the poll interval — before, the wait saw it only at the select's next
 * timeout (50 ms in the server), and a batch made while its trainer waited reached it a median 35 ms late. The poll
 * here is an hour: a wait that still depended on it would run into the test's timeout. A peer that closes ends the
 * wait too.
 */
@Timeout(60)
class AwaitWatchingPeerTest {
    @TempDir Path tmp;

    @Test
    void theAnswerMadeEndsTheWaitAtOnceNotAtThePollsTimeout() throws Exception {
        var address = UnixDomainSocketAddress.of(tmp.resolve("s.sock"));
        try (var server = ServerSocketChannel.open(StandardProtocolFamily.UNIX).bind(address);
             var client = SocketChannel.open(address);
             var peer = server.accept()) {
            var reader = new FeedProtocol.FrameReader(peer);
            var done = new CompletableFuture<String>();
            var failure = new CompletableFuture<Throwable>();
            Thread waiter = Thread.ofPlatform().daemon().start(() -> {
                try {
                    reader.awaitWatchingPeer(peer, done, TimeUnit.HOURS.toMillis(1));
                    failure.complete(null);
                } catch (Throwable e) {
                    failure.complete(e);
                }
            });
            // the answer is made only once the wait sits in its select (seen in its stack), so that a wait that saw it
            // only at the poll's timeout would hang here
            while (!inSelect(waiter) && waiter.isAlive()) Thread.sleep(1);
            done.complete("batch");
            waiter.join(TimeUnit.SECONDS.toMillis(30));
            assertEquals(false, waiter.isAlive(), "the wait did not end when its answer was made");
            assertEquals(null, failure.getNow(null));
            // and the connection reads on as before: the trainer's next request
            FeedProtocol.writeFrame(client, FeedProtocol.NEXT, null);
            assertEquals(FeedProtocol.NEXT, reader.next().type());
        }
    }

    private static boolean inSelect(Thread t) {
        for (var f : t.getStackTrace())
            if (f.getMethodName().equals("doSelect") || f.getClassName().equals("sun.nio.ch.EPoll")) return true;
        return false;
    }

    @Test
    void aPeerThatClosesEndsTheWait() throws Exception {
        var address = UnixDomainSocketAddress.of(tmp.resolve("c.sock"));
        try (var server = ServerSocketChannel.open(StandardProtocolFamily.UNIX).bind(address)) {
            var client = SocketChannel.open(address);
            try (var peer = server.accept()) {
                var reader = new FeedProtocol.FrameReader(peer);
                client.close();
                assertThrows(EOFException.class, () -> reader.awaitWatchingPeer(peer, new CompletableFuture<>(), TimeUnit.HOURS.toMillis(1)));
            }
        }
    }
}
