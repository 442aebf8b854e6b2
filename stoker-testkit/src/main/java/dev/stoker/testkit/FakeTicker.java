package dev.stoker.testkit;

import dev.stoker.core.Ticker;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicLong;

/** A {@link Ticker} a test moves by hand: time stands still until {@link #advance} is called. Safe to share between threads. */
public final class FakeTicker implements Ticker {
    private final AtomicLong nanos = new AtomicLong();

    public FakeTicker() {}

    public FakeTicker(long startNanos) { nanos.set(startNanos); }

    @Override
    public long read() { return nanos.get(); }

    /** Moves the time on by {@code d} and returns the new reading. */
    public long advance(Duration d) { return nanos.addAndGet(d.toNanos()); }

    /** Moves the time on by {@code millis} milliseconds and returns the new reading. */
    public long advanceMillis(long millis) { return nanos.addAndGet(millis * 1_000_000L); }
}
