//! `--help` for every command, with examples.

use crate::support::arcp;

#[test]
fn every_command_has_help_with_examples() {
    for command in [&[][..], &["invoke"], &["mock"], &["mock", "serve"]] {
        let out = arcp(command.iter().copied().chain(["--help"]))
            .assert()
            .success()
            .get_output()
            .clone();
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(help.contains("Usage: arcp"), "{command:?}: {help}");
        assert!(
            help.contains("Examples:"),
            "{command:?} has no examples: {help}"
        );
        assert!(out.stderr.is_empty(), "{command:?} wrote to stderr");
    }
}

#[test]
fn invoke_help_documents_the_json_contract_and_exit_statuses() {
    let out = arcp(["invoke", "--help"])
        .assert()
        .success()
        .get_output()
        .clone();
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "\"status\":\"ok\"",
        "\"status\":\"error\"",
        "0  ok: the tool returned a result",
        "3  did not run",
        "4  may have run",
        "6  not sent",
        "ARCP_TOKEN",
        "auto",
        "legacy",
    ] {
        assert!(help.contains(needle), "help lacks {needle:?}");
    }
}

#[test]
fn help_never_shows_the_token_from_the_environment() {
    let out = arcp(["invoke", "--help"])
        .env("ARCP_TOKEN", "env-secret-8472")
        .assert()
        .success()
        .get_output()
        .clone();
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("ARCP_TOKEN"));
    assert!(!help.contains("env-secret-8472"), "{help}");
}

#[test]
fn version_prints_and_exits_0() {
    arcp(["--version"])
        .assert()
        .success()
        .stdout(predicates::str::starts_with("arcp "));
}

#[test]
fn help_documents_the_environment_the_usage_status_and_the_early_key() {
    let out = arcp(["invoke", "--help"])
        .assert()
        .success()
        .get_output()
        .clone();
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in ["[env: ARCP_URL=]", "[env: ARCP_TOKEN", "64", "EX_USAGE"] {
        assert!(
            help.contains(needle),
            "invoke help lacks {needle:?}:\n{help}"
        );
    }
    assert!(
        help.contains("key is printed on stderr before the call starts"),
        "{help}"
    );
    let out = arcp(["--help"]).assert().success().get_output().clone();
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in ["64 usage error", "ARCP_URL", "ARCP_TOKEN"] {
        assert!(help.contains(needle), "top help lacks {needle:?}:\n{help}");
    }
}
