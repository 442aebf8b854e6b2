package dev.stoker.flight;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

@Timeout(10)
class BlockPoolTest {
    @Test
    void blocksComeInEighthsOfAPowerOfTwo() {
        assertEquals(64, BlockPool.blockSize(0));
        assertEquals(64, BlockPool.blockSize(64));
        assertEquals(1 << 20, BlockPool.blockSize(1 << 20));
        assertEquals((1 << 20) + (1 << 17), BlockPool.blockSize((1 << 20) + 1));
        assertEquals(72L << 20, BlockPool.blockSize((64L << 20) + 4096));
        for (long n = 65; n < 1 << 22; n = n * 3 / 2 + 7) {
            long b = BlockPool.blockSize(n);
            assertTrue(b >= n && b <= n + n / 8 + 8, n + " -> " + b);
        }
    }

    @Test
    void aReturnedBlockIsHandedOutAgainForASimilarSize() {
        try (var pool = new BlockPool(16 << 20)) {
            var a = pool.take(3_000_000);
            pool.give(a);
            var b = pool.take(2_900_000);
            assertSame(a, b, "same size class, same block");
            assertEquals(1, pool.blocksReused());
            assertEquals(1, pool.blocksAllocated());
            pool.give(b);
        }
    }

    @Test
    void thePoolKeepsAtMostItsLimitAndFreesTheRestAtOnce() {
        var pool = new BlockPool(5 << 20);
        var a = pool.take(4 << 20);
        var b = pool.take(4 << 20);
        pool.give(a);
        pool.give(b);
        assertEquals(4 << 20, pool.pooledBytes());
        assertFalse(a.arena().scope().isAlive() && b.arena().scope().isAlive(), "one of the two was freed");
        pool.close();
        assertFalse(a.arena().scope().isAlive() || b.arena().scope().isAlive(), "close frees the pooled blocks");
        var late = new BlockPool(1 << 20);
        var c = late.take(100);
        late.close();
        late.give(c);
        assertFalse(c.arena().scope().isAlive(), "a block coming back after close is freed");
        assertThrows(IllegalArgumentException.class, () -> new BlockPool(-1));
    }
}
