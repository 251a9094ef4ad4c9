//! The fix for what flock(1) habits type: `lease run X echo hi` (the command needs `--`
//! before it) and `lease run X -- 'echo hi && echo there'` (a shell line is not a program).

/// `s` as one shell word: as is when it needs no quoting, else in single quotes.
pub fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// For a usage error of `lease run` whose command was not after `--`: the command line with
/// `--` where it belongs. `args` are the program's arguments (without the program) and
/// `unexpected` the argument clap did not expect: the command's first word.
pub fn missing_dashes(args: &[String], unexpected: &str) -> Option<String> {
    if args.iter().any(|a| a == "--") {
        return None;
    }
    // The subcommand is the first argument that is not an option.
    let run = args.iter().position(|a| !a.starts_with('-'))?;
    if args[run] != "run" {
        return None;
    }
    let at = run + 1 + args[run + 1..].iter().position(|a| a == unexpected)?;
    let mut fixed: Vec<String> = args[..at].iter().map(|a| shell_word(a)).collect();
    fixed.push("--".into());
    fixed.extend(args[at..].iter().map(|a| shell_word(a)));
    Some(format!(
        "tip: put '--' before the command: lease {}",
        fixed.join(" ")
    ))
}

/// For a command that was not found: when it is one word that reads like a shell command line
/// (`'echo hi && echo there'`), how to run it as one.
pub fn shell_line(command: &[String]) -> Option<String> {
    let [line] = command else {
        return None;
    };
    let shell_like = line.contains(char::is_whitespace)
        || line.contains(['&', '|', ';', '>', '<', '$', '`', '*', '(']);
    shell_like.then(|| {
        format!(
            "it looks like a shell command line: run it with a shell, as `-- sh -c {}`",
            shell_word(line)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn dashes_go_before_the_command() {
        assert_eq!(
            missing_dashes(&args("run job echo hi"), "echo").as_deref(),
            Some("tip: put '--' before the command: lease run job -- echo hi")
        );
        assert_eq!(
            missing_dashes(&args("-v run --wait 5s job ls -l"), "ls").as_deref(),
            Some("tip: put '--' before the command: lease -v run --wait 5s job -- ls -l")
        );
        assert_eq!(missing_dashes(&args("run job -- x y"), "y"), None);
        assert_eq!(missing_dashes(&args("status job extra"), "extra"), None);
    }

    #[test]
    fn shell_lines_are_told_apart_from_programs() {
        let one = |s: &str| vec![s.to_string()];
        assert_eq!(
            shell_line(&one("echo hi && echo there")).as_deref(),
            Some(
                "it looks like a shell command line: run it with a shell, as \
                 `-- sh -c 'echo hi && echo there'`"
            )
        );
        assert_eq!(shell_line(&one("/no/such/program")), None);
        assert_eq!(shell_line(&args("ls -l")), None);
        assert_eq!(shell_word("it's here"), r"'it'\''s here'");
        assert_eq!(shell_word("a/b.c"), "a/b.c");
    }
}
