import com.google.re2j.Pattern;
import com.google.re2j.PatternSyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Base64;

/**
 * What RE2J (the regex library of Kafka's group coordinator) says of each regex of a file of
 * base64 lines: "OK", or "ERR" and the description Kafka puts in INVALID_REGULAR_EXPRESSION.
 * Then "MATCH" lines: for each "regex\ttopic" pair of the second file, whether the whole topic
 * matches (Kafka's TopicRegexResolver: matcher(topic).matches()).
 */
public class Re2jCheck {
    public static void main(String[] args) throws Exception {
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            String regex = decode(line);
            try {
                Pattern.compile(regex);
                System.out.println("OK");
            } catch (PatternSyntaxException e) {
                System.out.println("ERR\t" + e.getDescription());
            }
        }
        for (String line : Files.readAllLines(Path.of(args[1]))) {
            String[] pair = line.split("\t", 2);
            Pattern p = Pattern.compile(decode(pair[0]));
            System.out.println(p.matcher(decode(pair[1])).matches() ? "MATCH" : "NO");
        }
        System.out.println("DONE");
    }

    private static String decode(String b64) {
        return new String(Base64.getDecoder().decode(b64), StandardCharsets.UTF_8);
    }
}
