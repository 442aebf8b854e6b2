package dev.stoker.text;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * One parsed SFT record: its id, the chat in template order and the image references in the order
 * their placeholders appear, which is the order of the pixel rows and {@code image_grid_thw} rows.
 * Videos ({@link #videos()}) are parts of the messages too, in the order of their placeholders, which is the order
 * of the {@code pixel_values_videos} and {@code video_grid_thw} rows; audio clips ({@link #audios()}, issue 32) likewise;
 * {@link #media()} gives every kind in order.
 *
 * <p>{@code imagePaths} is redundant with the {@link Message.Image} parts and is checked against
 * them, so a caller can hand the list to the image pipeline without walking the messages.
 */
public record ChatSample(String id, List<Message> messages, List<String> imagePaths) {

    public ChatSample {
        Objects.requireNonNull(id, "id");
        messages = List.copyOf(messages);
        imagePaths = List.copyOf(imagePaths);
        var refs = imageRefs(messages);
        if (!refs.equals(imagePaths))
            throw new IllegalArgumentException("imagePaths " + imagePaths + " differ from the image parts " + refs);
    }

    /** A sample whose image list is taken from the messages. */
    public static ChatSample of(String id, List<Message> messages) {
        return new ChatSample(id, messages, imageRefs(messages));
    }

    /** This sample with its images, in order, replaced by {@code refs} (as many): where a source carries the images itself. */
    public ChatSample withImages(List<String> refs) {
        if (refs.size() != imagePaths.size())
            throw new IllegalArgumentException(refs.size() + " images for " + imagePaths.size() + " image parts");
        var out = new ArrayList<Message>(messages.size());
        int k = 0;
        for (var m : messages) {
            var parts = new ArrayList<Message.Part>(m.parts().size());
            for (var p : m.parts()) parts.add(p instanceof Message.Image ? new Message.Image(refs.get(k++)) : p);
            out.add(new Message(m.role(), parts));
        }
        return new ChatSample(id, out, refs);
    }

    /**
     * This sample with its videos, in order, replaced by the file references {@code refs} (as many), each keeping its
     * per-item options: where a source carries the videos itself (a tar's video members, a Parquet video column).
     */
    public ChatSample withVideos(List<String> refs) {
        int count = videos().size();
        if (refs.size() != count) throw new IllegalArgumentException(refs.size() + " videos for " + count + " video parts");
        var out = new ArrayList<Message>(messages.size());
        int k = 0;
        for (var m : messages) {
            var parts = new ArrayList<Message.Part>(m.parts().size());
            for (var p : m.parts()) parts.add(p instanceof Message.Video v ? new Message.Video(refs.get(k++), List.of(), v.options()) : p);
            out.add(new Message(m.role(), parts));
        }
        return new ChatSample(id, out, imagePaths);
    }

    /**
     * This sample with its audio clips, in order, replaced by the references {@code refs} (as many), each keeping its
     * per-item keys: where a source carries the clips itself (a tar's audio members, a Parquet audio column).
     */
    public ChatSample withAudios(List<String> refs) {
        int count = audios().size();
        if (refs.size() != count) throw new IllegalArgumentException(refs.size() + " audio clips for " + count + " audio parts");
        var out = new ArrayList<Message>(messages.size());
        int k = 0;
        for (var m : messages) {
            var parts = new ArrayList<Message.Part>(m.parts().size());
            for (var p : m.parts()) parts.add(p instanceof Message.Audio a ? new Message.Audio(refs.get(k++), a.options()) : p);
            out.add(new Message(m.role(), parts));
        }
        return new ChatSample(id, out, imagePaths);
    }

    /** The videos of the chat, in placeholder order. */
    public List<Message.Video> videos() {
        var out = new ArrayList<Message.Video>();
        for (var m : messages)
            for (var p : m.parts())
                if (p instanceof Message.Video v) out.add(v);
        return out;
    }

    /** The audio clips of the chat, in placeholder order (the order of the {@code input_features} rows). */
    public List<Message.Audio> audios() {
        var out = new ArrayList<Message.Audio>();
        for (var m : messages)
            for (var p : m.parts())
                if (p instanceof Message.Audio a) out.add(a);
        return out;
    }

    /** The images, videos and audio clips of the chat, in placeholder order (the order the template emits them). */
    public List<Message.Part> media() {
        var out = new ArrayList<Message.Part>();
        for (var m : messages)
            for (var p : m.parts())
                if (!(p instanceof Message.Text)) out.add(p);
        return out;
    }

    private static List<String> imageRefs(List<Message> messages) {
        var refs = new ArrayList<String>();
        for (var m : messages)
            for (var p : m.parts())
                if (p instanceof Message.Image img) refs.add(img.ref());
        return refs;
    }
}
