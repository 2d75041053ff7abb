"""The labelled set of bench/search.py: skills and the queries that should find them.

Skills: the 26 public skills of ``shared/corpus`` (read from there, never copied) plus
generated ones, one per (subject, task) pair: 60 subjects x 10 tasks = 600. Generated
descriptions use one wording of a subject and task; the queries use *other* words for
them (a user says "spreadsheet", the skill says "Excel workbooks"), so matching the
description's exact phrase is not enough, and every subject has ten near-twins that
share all its subject words, so ranking the right task first matters.

Queries: hand-written ones for the public skills (``CORPUS_QUERIES``), and for the
generated skills one query per skill of a fixed, seeded sample (``generated_queries``).
"""

from __future__ import annotations

import random

# (slug, description wording, query wordings)
SUBJECTS: list[tuple[str, str, tuple[str, ...]]] = [
    ("pdf", "PDF documents", ("pdf files", "a pdf")),
    ("xlsx", "Excel workbooks (.xlsx spreadsheets)", ("spreadsheet", "excel sheet")),
    ("docx", "Word documents (.docx)", ("word file", "docx report")),
    ("pptx", "PowerPoint slide decks", ("presentation", "slides")),
    ("csv", "CSV tables of comma-separated values", ("csv data", "comma separated file")),
    ("json", "JSON documents", ("json payload", "json file")),
    ("yaml", "YAML configuration files", ("yaml config", "yml file")),
    ("markdown", "Markdown notes and READMEs", ("markdown", "readme")),
    ("html", "HTML pages", ("web page", "html")),
    ("svg", "SVG vector graphics", ("vector image", "svg")),
    ("png", "PNG raster images", ("png picture", "bitmap image")),
    ("video", "video clips (mp4, webm)", ("movie clip", "mp4 video")),
    ("audio", "audio recordings (wav, mp3)", ("sound recording", "mp3")),
    ("email", "email messages and mailboxes", ("emails", "inbox")),
    ("calendar", "calendar events (iCalendar)", ("meetings schedule", "ics calendar")),
    ("invoice", "invoices and bills", ("billing invoice", "bill")),
    ("contract", "legal contracts", ("agreement", "legal contract")),
    ("resume", "résumés and CVs", ("cv", "resume")),
    ("sql", "SQL database schemas and queries", ("database query", "sql")),
    ("postgres", "PostgreSQL clusters", ("postgres database", "postgresql")),
    ("sqlite", "SQLite database files", ("sqlite db", "sqlite file")),
    ("docker", "Docker images and containers", ("container image", "dockerfile")),
    ("kubernetes", "Kubernetes manifests and clusters", ("k8s", "kubernetes deployment")),
    ("terraform", "Terraform infrastructure code", ("infrastructure as code", "terraform plan")),
    ("git", "git repositories and history", ("git repo", "commit history")),
    ("python", "Python packages and modules", ("python code", "python library")),
    ("rust", "Rust crates", ("rust project", "cargo crate")),
    ("javascript", "JavaScript and Node.js projects", ("node project", "js code")),
    ("typescript", "TypeScript codebases", ("ts project", "typescript")),
    ("go", "Go modules", ("golang", "go module")),
    ("java", "Java Maven projects", ("java app", "maven build")),
    ("regex", "regular expressions", ("regex pattern", "regular expression")),
    ("log", "application log files", ("server logs", "log output")),
    ("metrics", "time-series metrics (Prometheus)", ("prometheus metrics", "monitoring data")),
    ("trace", "distributed traces (OpenTelemetry)", ("otel traces", "tracing spans")),
    ("api", "REST APIs and OpenAPI specs", ("openapi spec", "rest endpoint")),
    ("graphql", "GraphQL schemas", ("graphql api", "graphql schema")),
    ("chart", "charts and plots of data", ("graph of data", "plot")),
    ("map", "geographic maps and GeoJSON", ("geojson", "map layers")),
    ("latex", "LaTeX papers", ("tex paper", "latex")),
    ("bibtex", "BibTeX bibliographies", ("citations", "bibliography")),
    ("translation", "translations between human languages", ("translate text", "localisation")),
    ("i18n", "i18n message catalogs (gettext .po)", ("po files", "locale strings")),
    ("font", "font files (TTF, OTF)", ("typeface", "ttf font")),
    ("color", "color palettes", ("colour scheme", "palette")),
    ("icon", "icon sets", ("icons", "app icon")),
    ("slack", "Slack workspaces and channels", ("slack channel", "slack message")),
    ("jira", "Jira issues and sprints", ("jira ticket", "sprint board")),
    ("github", "GitHub pull requests and issues", ("pull request", "gh issue")),
    ("ci", "CI pipelines (GitHub Actions)", ("github actions workflow", "ci pipeline")),
    ("certificate", "TLS certificates", ("ssl cert", "x509 certificate")),
    ("password", "password vaults and secrets", ("secrets", "credentials vault")),
    ("backup", "backups and snapshots", ("backup archive", "restore point")),
    ("zip", "ZIP and tar archives", ("tarball", "zip archive")),
    ("dns", "DNS zones and records", ("dns record", "domain zone")),
    ("nginx", "nginx server configuration", ("nginx config", "reverse proxy")),
    ("cron", "cron schedules", ("crontab", "scheduled job")),
    ("notebook", "Jupyter notebooks", ("ipynb", "jupyter")),
    ("dataset", "machine-learning datasets", ("training data", "ml dataset")),
    ("model", "machine-learning model checkpoints", ("model weights", "checkpoint")),
]

# (slug, description wording, query wordings)
TASKS: list[tuple[str, str, tuple[str, ...]]] = [
    ("convert", "Convert {s} to other formats", ("turn {q} into another format", "export {q} as")),
    ("validate", "Validate {s} and report every error", ("check {q} for mistakes", "lint {q}")),
    ("summarize", "Summarize {s} into a short digest", ("give me a summary of {q}", "tldr {q}")),
    ("extract", "Extract fields and text from {s}", ("pull data out of {q}", "parse {q}")),
    ("merge", "Merge several {s} into one", ("combine {q}", "join multiple {q}")),
    ("diff", "Compare two versions of {s} and show what changed", ("what changed {q}", "diff {q}")),
    ("generate", "Generate new {s} from a template", ("create {q} from scratch", "make {q}")),
    ("redact", "Redact personal data from {s}", ("remove private info {q}", "anonymize {q}")),
    ("search", "Search inside {s} for a phrase", ("find text in {q}", "grep {q}")),
    ("repair", "Repair corrupted or broken {s}", ("fix broken {q}", "recover damaged {q}")),
]

CORPUS_QUERIES: list[tuple[str, str]] = [
    ("how should I use skills at the start of a conversation", "using-superpowers"),
    ("run an implementation plan with subagents in this session", "subagent-driven-development"),
    ("explore ideas before building a new feature", "brainstorming"),
    ("write a plan for a multi-step task from a spec", "writing-plans"),
    ("execute a written plan with review checkpoints", "executing-plans"),
    ("I got code review feedback, how do I handle it", "receiving-code-review"),
    ("ask for a code review before merging", "requesting-code-review"),
    ("author a new skill and test it", "writing-skills"),
    ("work on independent tasks in parallel with agents", "dispatching-parallel-agents"),
    ("verify before claiming the work is complete", "verification-before-completion"),
    ("isolated workspace with git worktrees", "using-git-worktrees"),
    ("tests pass, how do I integrate my branch", "finishing-a-development-branch"),
    ("write the failing test first (tdd)", "test-driven-development"),
    ("debug a failing test systematically", "systematic-debugging"),
    ("make a poster, visual art in png", "canvas-design"),
    ("animated gif for slack", "slack-gif-creator"),
    ("build a react html artifact with tailwind", "web-artifacts-builder"),
    ("create an mcp server for an external service", "mcp-builder"),
    ("create a skill and measure its performance", "skill-creator"),
    ("generative art with p5.js", "algorithmic-art"),
    ("test a local web app with playwright", "webapp-testing"),
    ("write a status report or newsletter for my company", "internal-comms"),
    ("apply anthropic brand colors", "brand-guidelines"),
    ("build an app with the claude api and anthropic sdk", "claude-api"),
    ("style slides with a theme", "theme-factory"),
    ("distinctive visual design for a new ui", "frontend-design"),
]


def generated_skills() -> list[tuple[str, str, str]]:
    """``(name, description, tags)`` of every generated skill."""
    out = []
    for s_slug, s_words, _ in SUBJECTS:
        for t_slug, t_words, _ in TASKS:
            name = f"{s_slug}-{t_slug}"
            description = t_words.format(s=s_words) + f". Use when working with {s_words}."
            out.append((name, description, f"{s_slug} {t_slug}"))
    return out


def generated_queries(n: int = 100, seed: int = 29) -> list[tuple[str, str]]:
    """``n`` (query, expected skill) pairs over the generated skills, seeded."""
    rng = random.Random(seed)
    pairs = [(s, t) for s in SUBJECTS for t in TASKS]
    out = []
    for subject, task in rng.sample(pairs, n):
        q = rng.choice(task[2]).format(q=rng.choice(subject[2]))
        out.append((q, f"{subject[0]}-{task[0]}"))
    return out
