package dev.stoker.store;

import java.io.IOException;

/**
 * The store could not provide space: an object larger than the budget, a segment file that could
 * not be created (file system full), or a store that was closed. Checked, because each of these is
 * an operational condition a caller must handle (it arrives as the cause of a failed
 * {@code allocate} future). Programming errors (releasing twice, leasing a dead object, sealing an
 * aborted allocation) are {@link IllegalStateException}s instead.
 */
public class StoreException extends IOException {
    private static final long serialVersionUID = 1L;

    public StoreException(String message) {
        super(message);
    }

    public StoreException(String message, Throwable cause) {
        super(message, cause);
    }
}
