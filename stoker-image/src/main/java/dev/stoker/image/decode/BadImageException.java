package dev.stoker.image.decode;

/** Internal: the bytes are not a decodable image; the public decoders rewrap it as a SampleException. */
final class BadImageException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    BadImageException(String message) { super(message); }

    BadImageException(String message, Throwable cause) { super(message, cause); }
}
