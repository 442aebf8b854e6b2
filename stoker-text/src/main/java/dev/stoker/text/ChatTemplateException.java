package dev.stoker.text;

/**
 * A chat template that cannot be used: its source does not parse, it raised ({@code raise_exception}) or failed while
 * rendering, or it needs what the template engine lacks. The message names the template error and, where known, its
 * line.
 */
public final class ChatTemplateException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public ChatTemplateException(String message) {
        super(message);
    }

    public ChatTemplateException(String message, Throwable cause) {
        super(message, cause);
    }
}
