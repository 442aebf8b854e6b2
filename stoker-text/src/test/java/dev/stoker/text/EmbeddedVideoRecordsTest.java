package dev.stoker.text;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.stoker.core.SampleException;
import dev.stoker.core.UnservedMedia;
import dev.stoker.text.Message.Image;
import dev.stoker.text.Message.Text;
import dev.stoker.text.Message.Video;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Videos a source carries (issue 29: a WebDataset shard's video members, a Parquet video column) placed by
 * {@link SampleParser#parseRecord(byte[], String, List, List)} as carried images are, apart from them: a record without a
 * video list takes them as its list, one with a list or typed items has each replaced in order (per-item keys kept),
 * a count that differs is an error, and a parser without video refuses a record that carries any.
 */
@Timeout(60)
class EmbeddedVideoRecordsTest {
    private final SampleParser parser = new SampleParser(SampleParser.Videos.ACCEPT);

    private ChatSample parse(SampleParser p, String json, List<String> images, List<String> videos) {
        return p.parseRecord(json.getBytes(StandardCharsets.UTF_8), "shard-000.tar:k", images, videos);
    }

    private String refusal(SampleParser p, String json, List<String> images, List<String> videos) {
        var e = assertThrows(SampleException.class, () -> parse(p, json, images, videos), json);
        assertEquals(SampleException.Stage.MANIFEST, e.stage());
        assertEquals("shard-000.tar:k", e.sampleId());
        return e.getMessage();
    }

    private static final String LLAVA = """
        {"conversations": [{"from": "human", "value": "<image>\\n<video>\\nSame scene?"}, {"from": "gpt", "value": "Yes."}]}""";

    @Test
    void aRecordWithoutListsTakesTheCarriedImagesAndVideosInOrder() {
        var s = parse(parser, LLAVA, List.of("k.jpg"), List.of("k.mp4"));
        assertEquals(List.of(new Image("k.jpg"), Video.of("k.mp4"), new Text("Same scene?")), s.messages().get(0).parts(),
                "LLaVA's strip rule, as for the carried image");
        var two = parse(parser, """
            {"messages": [{"role": "user", "content": "<video>then <video>?"}, {"role": "assistant", "content": "Both."}]}""",
                List.of(), List.of("k.0.mp4", "k.1.avi"));
        assertEquals(List.of(Video.of("k.0.mp4"), new Text("then "), Video.of("k.1.avi"), new Text("?")), two.messages().get(0).parts());
        assertEquals(List.of(), two.imagePaths());
        var shareGpt = parse(parser, """
            {"conversations": [{"from": "human", "value": "<video> <image>"}, {"from": "gpt", "value": "ok"}], "images": ["x.jpg"]}""",
                List.of("k.jpg"), List.of("k.mp4"));
        assertEquals(List.of(Video.of("k.mp4"), new Text(" "), new Image("k.jpg")), shareGpt.messages().get(0).parts(),
                "beside a listed 'images' the videos are ShareGPT's 'videos': text kept verbatim");
    }

    @Test
    void listedAndTypedVideosAreReplacedInOrderKeepingTheirPerItemKeys() {
        var listed = parse(parser, """
            {"messages": [{"role": "user", "content": "<video><video>"}, {"role": "assistant", "content": "."}],
             "videos": ["a.mp4", ["f0.jpg", "f1.jpg"]]}""", List.of(), List.of("k.0.mp4", "k.1.mp4"));
        assertEquals(List.of(Video.of("k.0.mp4"), Video.of("k.1.mp4")), listed.videos(), "a frame list carried as a file");
        var typed = parse(parser, """
            {"messages": [{"role": "user", "content": [{"type": "video", "video": "orig.mp4", "fps": 1.5, "max_frames": 8},
                                                        {"type": "text", "text": "and"}, {"type": "video"}]},
                          {"role": "assistant", "content": "."}]}""", List.of(), List.of("k.0.mp4", "k.1.mp4"));
        assertEquals(List.of(new Video("k.0.mp4", List.of(), Map.of("fps", 1.5, "max_frames", 8L)), Video.of("k.1.mp4")), typed.videos(),
                "a bare typed item is named after the video of its place; keys kept");
    }

    @Test
    void countsThatDifferAreErrorsNotDroppedVideos() {
        String noPlaceholder = "{\"messages\": [{\"role\": \"user\", \"content\": \"Describe.\"}, {\"role\": \"assistant\", \"content\": \".\"}]}";
        assertEquals("the messages have 0 <video> placeholder(s) but the record lists 1 video(s) in 'videos'",
                refusal(parser, noPlaceholder, List.of(), List.of("k.mp4")));
        assertEquals("the record names 2 video(s) but its source carries 1 for it [k.mp4]", refusal(parser, """
            {"messages": [{"role": "user", "content": "<video><video>"}, {"role": "assistant", "content": "."}],
             "videos": ["a.mp4", "b.mp4"]}""", List.of(), List.of("k.mp4")));
    }

    @Test
    void aParserWithoutVideoRefusesACarriedVideoNamingIt() {
        var byDefault = new SampleParser();
        String message = refusal(byDefault, LLAVA, List.of("k.jpg"), List.of("k.mp4", "k.1.mp4"));
        assertEquals(UnservedMedia.VIDEO.notSupported() + ": the record's source carries video k.mp4 and 1 more", message);
        assertEquals("video is not supported", SampleException.reasonOf(message), "one cause for a whole data set");
        assertEquals(List.of(new Image("k.jpg")), parse(byDefault, LLAVA.replace("<video>\\n", ""), List.of("k.jpg"), List.of()).media(),
                "images alone as before");
        var why = new SampleParser(SampleParser.Videos.REFUSE, "transformers 9.9 has no video rules Stoker knows");
        message = refusal(why, LLAVA, List.of("k.jpg"), List.of("k.mp4"));
        assertEquals(UnservedMedia.VIDEO.notSupported() + ": the record's source carries video k.mp4; transformers 9.9 has no video rules Stoker knows",
                message, "the job's reason, as for a listed video");
        assertEquals("video is not supported", SampleException.reasonOf(message));
    }
}
