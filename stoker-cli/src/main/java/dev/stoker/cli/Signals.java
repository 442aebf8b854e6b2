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
        on("TERM", stop);
        on("INT", stop);
    }

    /**
     * Runs {@code action} on the JVM's signal thread whenever signal {@code name} ({@code TERM}, {@code INT}) arrives,
     * instead of the default; a signal this platform does not offer (or the JVM reserves) keeps its default.
     */
    static void on(String name, Runnable action) {
        try {
            Signal.handle(new Signal(name), s -> action.run());
        } catch (IllegalArgumentException e) {
            // the signal is not available on this platform (or reserved by the JVM): the default applies
        }
    }
}
