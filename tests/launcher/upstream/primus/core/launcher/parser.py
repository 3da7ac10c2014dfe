"""Test fixture: Primus's pretrain parser (the arguments the train subcommand relies on)."""


def add_pretrain_parser(parser):
    parser.add_argument("--config", required=True, help="experiment YAML")
    parser.add_argument("--backend_path", default=None)
    return parser
