package dev.stoker.store;

import java.nio.file.Path;

/**
 * A process that owns a store arena (for {@link StaleArenaTest}): opens a store in {@code args[0]},
 * seals one object, prints {@code READY <arena dir>} and waits until killed or its stdin closes.
 */
public final class ArenaOwnerMain {
    private ArenaOwnerMain() {}

    public static void main(String[] args) throws Exception {
        var store = ShmObjectStore.open(new StoreConfig(Path.of(args[0]), 4L << 20, "stoker"));
        store.allocate(1 << 20).get().seal();
        System.out.println("READY " + store.arenaDir());
        System.out.flush();
        while (System.in.read() >= 0) {
            // wait for the parent to kill us (or to go away)
        }
    }
}
