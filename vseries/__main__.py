from vseries.cli import main

raise SystemExit(main())
