package dev.stoker.store;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Pattern;

/**
 * Configuration of one {@link ShmObjectStore}, validated once when the record is built.
 *
 * @param directory    where the store creates its arena directory; a tmpfs such as {@code /dev/shm}
 *                     so that segment files live in memory (default {@link #DEFAULT_DIRECTORY})
 * @param budgetBytes  hard limit on the sum of the capacities of all segment files the store keeps
 *                     (in use and free); {@code --shm-budget} (default {@link #DEFAULT_BUDGET_BYTES})
 * @param instanceName prefix of the arena directory's name, {@code <instanceName>-<pid>-<hex>}; also
 *                     selects which stale arenas a new store may remove (default
 *                     {@link #DEFAULT_INSTANCE_NAME})
 */
public record StoreConfig(Path directory, long budgetBytes, String instanceName) {
    public static final Path DEFAULT_DIRECTORY = Path.of("/dev/shm");
    public static final long DEFAULT_BUDGET_BYTES = 4L << 30;
    public static final String DEFAULT_INSTANCE_NAME = "stoker";

    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9_][A-Za-z0-9._]*");

    public StoreConfig {
        if (directory == null) throw new IllegalArgumentException("store directory must be given");
        if (budgetBytes <= 0) {
            throw new IllegalArgumentException("store budget must be positive, got " + budgetBytes + " bytes (--shm-budget)");
        }
        if (instanceName == null || !NAME.matcher(instanceName).matches()) {
            throw new IllegalArgumentException("store instance name must be letters, digits, '_' or '.' (not starting with '.'), got "
                    + (instanceName == null ? "null" : "'" + instanceName + "'"));
        }
        if (!Files.exists(directory)) throw new IllegalArgumentException("store directory " + directory + " does not exist");
        if (!Files.isDirectory(directory)) throw new IllegalArgumentException("store directory " + directory + " is not a directory");
    }

    /** {@link #DEFAULT_DIRECTORY} and {@link #DEFAULT_INSTANCE_NAME} with the given budget. */
    public static StoreConfig defaults(long budgetBytes) {
        return new StoreConfig(DEFAULT_DIRECTORY, budgetBytes, DEFAULT_INSTANCE_NAME);
    }

    /** {@link #defaults(long)} with {@link #DEFAULT_BUDGET_BYTES}. */
    public static StoreConfig defaults() {
        return defaults(DEFAULT_BUDGET_BYTES);
    }

    /** A copy in another directory (tests, or a tmpfs other than {@code /dev/shm}). */
    public StoreConfig withDirectory(Path newDirectory) {
        return new StoreConfig(newDirectory, budgetBytes, instanceName);
    }
}
