package dev.stoker.image.decode;

/** A container format the decoders read, identified from the file's magic bytes and never from its name. */
public enum ImageFormat { JPEG, PNG, GIF, BMP, WEBP }
