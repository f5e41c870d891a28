//! Renders a call's job events on stderr while it runs: a progress bar
//! (only when stderr is a terminal) driven by progress events, and one line
//! per log or metric event.

use std::io::IsTerminal;
use std::time::Duration;

use arcp_sdk::{EventBody, Events, Redactor};

use crate::output::human;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::oneshot;

/// Draws the events of one call.
#[derive(Debug)]
pub(crate) struct EventRenderer {
    /// Created at the first progress event.
    bar: Option<ProgressBar>,
    /// Whether stderr is a terminal (else the bar stays hidden).
    draw: bool,
    /// Whether the bar has a known length, once styled.
    bounded: Option<bool>,
    /// The client's secrets, scrubbed from every line (whose control
    /// characters are escaped too: they come from the runtime).
    redactor: Redactor,
}

impl EventRenderer {
    /// A renderer that draws the bar when stderr is a terminal, unless
    /// `quiet_bar` (diagnostic logs share stderr and would tear it).
    pub(crate) fn new(redactor: Redactor, quiet_bar: bool) -> Self {
        EventRenderer {
            bar: None,
            draw: !quiet_bar && std::io::stderr().is_terminal(),
            bounded: None,
            redactor,
        }
    }

    /// Renders every event until the call ends (or `stop` fires, or its
    /// sender is dropped), then clears the bar.
    pub(crate) async fn run(mut self, mut events: Events, mut stop: oneshot::Receiver<()>) {
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(event) => self.render(event.typed()),
                    None => break,
                },
                _ = &mut stop => break,
            }
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn render(&mut self, body: EventBody) {
        match body {
            EventBody::Progress {
                current,
                total,
                units,
                message,
            } => self.progress(current, total, units, message),
            EventBody::Log { level, message } => {
                let line = format!(
                    "[{}] {}",
                    human(&self.redactor, &level.to_string()),
                    human(&self.redactor, &message)
                );
                self.line(&line);
            }
            EventBody::Metric { name, value, unit } => {
                let line = format!(
                    "[metric] {} = {value}{}",
                    human(&self.redactor, &name),
                    unit.map(|u| format!(" {}", human(&self.redactor, &u)))
                        .unwrap_or_default()
                );
                self.line(&line);
            }
            // Result chunks are not rendered: the client does not assemble
            // them (a streamed result's `ToolOutput::value` is the terminal's
            // `{result_id, ...}`), and that value is what gets printed.
            // Other kinds have no rendering.
            _ => {}
        }
    }

    fn progress(
        &mut self,
        current: f64,
        total: Option<f64>,
        units: Option<String>,
        message: Option<String>,
    ) {
        let bar = self.bar.get_or_insert_with(|| {
            let target = if self.draw {
                ProgressDrawTarget::stderr()
            } else {
                ProgressDrawTarget::hidden()
            };
            let bar = ProgressBar::with_draw_target(None, target);
            if self.draw {
                bar.enable_steady_tick(Duration::from_millis(120));
            }
            bar
        });
        let bounded = matches!(total, Some(t) if t > 0.0);
        if self.bounded != Some(bounded) {
            self.bounded = Some(bounded);
            let units = units
                .map(|u| format!(" {}", human(&self.redactor, &u)))
                .unwrap_or_default();
            let template = if bounded {
                format!(
                    "{{spinner}} [{{elapsed_precise}}] {{bar:40}} {{pos}}/{{len}}{units} {{msg}}"
                )
            } else {
                format!("{{spinner}} [{{elapsed_precise}}] {{pos}}{units} {{msg}}")
            };
            bar.set_style(
                ProgressStyle::with_template(&template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
        }
        match total {
            Some(total) if bounded => bar.set_length(total.round().max(1.0) as u64),
            _ => bar.unset_length(),
        }
        bar.set_position(current.max(0.0).round() as u64);
        if let Some(message) = message {
            bar.set_message(human(&self.redactor, &message));
        }
    }

    /// A line on stderr that does not tear the bar.
    fn line(&self, line: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}
