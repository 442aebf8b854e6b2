package dev.stoker.node;

/**
 * A configuration the node refuses: a value out of range, settings that contradict each other, a
 * file that is missing or open to other users. The message names the setting as its option
 * ({@code --max-pixels: …}) and never holds a secret.
 */
public final class ConfigException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public ConfigException(String message) { super(message); }

    public ConfigException(String message, Throwable cause) { super(message, cause); }
}
