package dev.stoker.core;

/**
 * A source of nanosecond time for rules that wait on time: a claim's grace, a stall, a HELLO deadline, the wait for an
 * early judgement. {@link #system()} reads {@link System#nanoTime()}; a test passes a ticker it moves by hand
 * ({@code dev.stoker.testkit.FakeTicker}) and checks each rule in milliseconds, without sleeping.
 *
 * <p>Only differences of two readings mean anything, as with {@link System#nanoTime()}.
 */
@FunctionalInterface
public interface Ticker {
    /** Nanoseconds from some fixed, arbitrary origin. */
    long read();

    /** The ticker of the real clock. */
    static Ticker system() { return System::nanoTime; }
}
