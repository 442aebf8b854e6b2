package dev.stoker.cli;

import sun.misc.Signal;

/**
 * SIGTERM and SIGINT as an orderly stop: the handler only signals the main thread, which then
 * closes the service (sockets, shared-memory files) and exits 0. Without it, the JVM would run its
 * shutdown hooks concurrently with the still-running service and exit 143.
 */
final class Signals {
    private Signals() {}

    static void onTermination(Runnable stop) {
        for (String name : new String[] {"TERM", "INT"}) {
            try {
                Signal.handle(new Signal(name), s -> stop.run());
            } catch (IllegalArgumentException e) {
                // the signal is not available on this platform (or reserved by the JVM): the default applies
            }
        }
    }
}
