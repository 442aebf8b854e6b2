package dev.stoker.video.ffmpeg;

/** Reads the fields of the packet a {@link Demuxer} holds: no copy, valid until its next {@code nextPacket}. */
public final class PacketView {
    private final Demuxer demuxer;

    public PacketView(Demuxer demuxer) { this.demuxer = demuxer; }

    public long pts() { return AvField.AVPacket_pts.getLong(demuxer.packet()); }

    public long dts() { return AvField.AVPacket_dts.getLong(demuxer.packet()); }

    public long duration() { return AvField.AVPacket_duration.getLong(demuxer.packet()); }

    public int flags() { return AvField.AVPacket_flags.getInt(demuxer.packet()); }

    public int sizeBytes() { return AvField.AVPacket_size.getInt(demuxer.packet()); }

    public long positionBytes() { return AvField.AVPacket_pos.getLong(demuxer.packet()); }
}
