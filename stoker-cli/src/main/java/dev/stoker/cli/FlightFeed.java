package dev.stoker.cli;

import dev.stoker.flight.BatchSource;
import dev.stoker.transport.BatchLayout;
import dev.stoker.transport.BatchProvider;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.CompletableFuture;

/**
 * A {@link FeedService} as the {@link BatchSource} of the Arrow Flight endpoint: shared-memory
 * batches are lent as they are (the Flight server copies them onto the wire, then the lease ends);
 * heap batches (prefetch mode) are laid out once into native memory first.
 */
final class FlightFeed implements BatchSource {
    private final FeedService service;

    FlightFeed(FeedService service) { this.service = service; }

    @Override
    public void validate(int rank, int world) { service.validate(rank, world); }

    @Override
    public CompletableFuture<Leased> next(int rank) {
        return service.next(rank).thenApply(d -> switch (d) {
            case null -> null;
            case BatchProvider.Stored s -> new Leased(s.batch(), s.release());
            case BatchProvider.Prepared p -> {
                Arena arena = Arena.ofShared();
                MemorySegment seg = arena.allocate(BatchLayout.sizeOf(p.tensors()), 64);
                BatchLayout.write(p.meta(), p.tensors(), seg);
                yield new Leased(seg, arena::close);
            }
        });
    }
}
