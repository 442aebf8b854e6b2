package dev.stoker.video.ffmpeg;

/** An FFmpeg AVRational: {@code num/den}; {@code 0/0} or {@code 0/1} where FFmpeg does not know the value. */
public record Rational(int num, int den) {
    public boolean known() { return num != 0 && den != 0; }

    public double toDouble() { return den == 0 ? Double.NaN : (double) num / den; }

    @Override
    public String toString() { return num + "/" + den; }
}
